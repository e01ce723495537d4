// Package sftest checks the rate-limit headers httplimit sends with a
// maintained structured-field parser (github.com/dunglas/httpsfv). It is
// a module of its own so that the root module does not depend on it.
package sftest
