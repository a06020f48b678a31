package etcd

import (
	"context"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/tollgate-proxy/tollgate/internal/itest"
	"github.com/tollgate-proxy/tollgate/provider/kv/internal/kvtest"
)

// TestScale is the KV scale measurement (kvtest.Scale) against a real etcd:
// 10,000 keys under the root, written 100 to a transaction (etcd's default
// --max-txn-ops is 128).
func TestScale(t *testing.T) {
	itest.NeedScale(t)
	s := startServer(t)
	kvtest.Scale(t, s, func(keys, values []string) {
		for i := 0; i < len(keys); i += 100 {
			var ops []clientv3.Op
			for j := i; j < min(i+100, len(keys)); j++ {
				ops = append(ops, clientv3.OpPut(keys[j], values[j]))
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			_, err := s.cli.Txn(ctx).Then(ops...).Commit()
			cancel()
			if err != nil {
				t.Fatalf("writing keys %d-%d: %v", i, i+len(ops)-1, err)
			}
		}
	})
}
