module github.com/redlimit/redlimit/httplimit/internal/sftest

go 1.26.0

replace github.com/redlimit/redlimit => ../../..

require github.com/redlimit/redlimit v0.0.0-00010101000000-000000000000

require github.com/dunglas/httpsfv v1.1.2
