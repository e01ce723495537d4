module github.com/redlimit/redlimit/serve

go 1.26.0

replace github.com/redlimit/redlimit => ../

require (
	github.com/redlimit/redlimit v0.0.0-00010101000000-000000000000
	gopkg.in/yaml.v3 v3.0.1
)

require (
	github.com/kr/pretty v0.1.0 // indirect
	github.com/kr/text v0.2.0 // indirect
	gopkg.in/check.v1 v1.0.0-20180628173108-788fd7840127 // indirect
)
