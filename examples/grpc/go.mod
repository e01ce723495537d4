module github.com/redlimit/redlimit/examples/grpc

go 1.26.0

replace (
	github.com/redlimit/redlimit => ../..
	github.com/redlimit/redlimit/grpclimit => ../../grpclimit
)

require (
	github.com/redis/go-redis/v9 v9.23.0
	github.com/redlimit/redlimit v0.0.0
	github.com/redlimit/redlimit/grpclimit v0.0.0
	go.uber.org/goleak v1.3.0
	google.golang.org/genproto/googleapis/rpc v0.0.0-20261104224025-d1e00e9f33ab
	google.golang.org/grpc v1.85.0
)

require (
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/grpc-ecosystem/go-grpc-middleware/v2 v2.3.4 // indirect
	go.uber.org/atomic v1.12.0 // indirect
	golang.org/x/net v0.60.0 // indirect
	golang.org/x/sys v0.48.0 // indirect
	golang.org/x/text v0.42.0 // indirect
	google.golang.org/protobuf v1.36.12 // indirect
)
