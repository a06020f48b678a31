module github.com/tollgate-proxy/tollgate/bench

go 1.24
