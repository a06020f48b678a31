module github.com/tollgate-proxy/tollgate/bench

go 1.24.0

require github.com/maxmind/mmdbwriter v1.2.0

require (
	github.com/oschwald/maxminddb-golang/v2 v2.1.1 // indirect
	go4.org/netipx v0.0.0-20231129151722-fdeea329fbba // indirect
	golang.org/x/sys v0.38.0 // indirect
)
