// Package e2e is the dashboard's browser test: a real Redis, two real
// serve instances and Debian's chromium driven by playwright-core (from
// ../web's node_modules). It is a module of its own so that the serve
// module's tests never need a browser; scripts/install (run by
// scripts/test --install and by CI) installs chromium and runs npm ci in
// ../web first.
package e2e
