package api

// The built-in middleware kinds, as the process has them.
import _ "github.com/tollgate-proxy/tollgate/middleware/standard"
