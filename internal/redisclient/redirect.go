package redisclient

import (
	"context"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// MaxRedirects is how many times a Redirecting client resends a command
// the Cluster turned down without running it (MOVED, ASK, TRYAGAIN,
// CLUSTERDOWN); it stops earlier when the caller's context ends.
const MaxRedirects = 5

// Redirecting runs scripts and hand-built commands on a Cluster client
// built not to resend anything (MaxRedirects and MaxRetries -1), following
// the Cluster's refusals itself: MOVED (the slot has a new owner: resend
// there, while the client reloads its slot map), ASK (the slot is migrating and the key has left:
// resend to the importing node after ASKING) and TRYAGAIN or CLUSTERDOWN
// (resend after a short pause). Each of these replies means the command did
// not run, so resending it cannot grant twice; a broken connection or a
// timeout, after which it may have run, is never resent. It implements
// redis.Scripter and Do.
type Redirecting struct {
	cc *redis.ClusterClient
	// loadFunctions, when set, loads the function libraries a node
	// lacks (an importing node may never have served the store).
	loadFunctions func(ctx context.Context, node *redis.Client) error
}

// NewRedirecting wraps cc; loadFunctions (may be nil) loads the store's
// function library on a node that answers "Function not found" after ASK.
func NewRedirecting(cc *redis.ClusterClient, loadFunctions func(ctx context.Context, node *redis.Client) error) *Redirecting {
	return &Redirecting{cc: cc, loadFunctions: loadFunctions}
}

var _ redis.Scripter = (*Redirecting)(nil)

// Do sends args as one command, following the Cluster's refusals.
func (r *Redirecting) Do(ctx context.Context, args ...any) *redis.Cmd {
	cmd := r.cc.Do(ctx, args...)
	for attempt := 0; attempt < MaxRedirects && cmd.Err() != nil && ctx.Err() == nil; attempt++ {
		err := cmd.Err()
		if addr, ok := redis.IsAskError(err); ok {
			cmd = r.at(ctx, addr, true, args)
			continue
		}
		if addr, ok := redis.IsMovedError(err); ok {
			// The client reloads its slot map in the background
			// (it did on the MOVED): meanwhile, to the new owner.
			r.cc.ReloadState(ctx)
			cmd = r.at(ctx, addr, false, args)
			continue
		}
		if redis.IsTryAgainError(err) || redis.IsClusterDownError(err) {
			if !pause(ctx, attempt) {
				break
			}
			r.cc.ReloadState(ctx)
			cmd = r.cc.Do(ctx, args...)
			continue
		}
		break
	}
	return cmd
}

// pause waits before the attempt+1th resend after TRYAGAIN or CLUSTERDOWN:
// 10ms, doubling; false if ctx ended first.
func pause(ctx context.Context, attempt int) bool {
	t := time.NewTimer(10 * time.Millisecond << attempt)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// at sends args to the primary at addr, preceded by ASKING if asking (as a
// Cluster migrating the key's slot asks).
func (r *Redirecting) at(ctx context.Context, addr string, asking bool, args []any) *redis.Cmd {
	node, err := r.node(ctx, addr)
	if err != nil {
		cmd := redis.NewCmd(ctx, args...)
		cmd.SetErr(err)
		return cmd
	}
	run := func() *redis.Cmd {
		if !asking {
			return node.Do(ctx, args...)
		}
		pipe := node.Pipeline()
		pipe.Do(ctx, "asking")
		cmd := pipe.Do(ctx, args...)
		_, _ = pipe.Exec(ctx)
		return cmd
	}
	cmd := run()
	if r.loadFunctions != nil && cmd.Err() != nil && redis.HasErrorPrefix(cmd.Err(), "ERR Function not found") {
		if err := r.loadFunctions(ctx, node); err == nil {
			cmd = run()
		}
	}
	return cmd
}

// node returns the Cluster client's connection to the primary at addr.
func (r *Redirecting) node(ctx context.Context, addr string) (*redis.Client, error) {
	var (
		mu    sync.Mutex
		found *redis.Client
	)
	find := func(ctx context.Context, n *redis.Client) error {
		if n.Options().Addr == addr {
			mu.Lock()
			found = n
			mu.Unlock()
		}
		return nil
	}
	if err := r.cc.ForEachMaster(ctx, find); err != nil {
		return nil, err
	}
	if found == nil {
		r.cc.ReloadState(ctx)
		if err := r.cc.ForEachMaster(ctx, find); err != nil {
			return nil, err
		}
	}
	if found == nil {
		return nil, &redirectError{addr: addr}
	}
	return found, nil
}

type redirectError struct{ addr string }

func (e *redirectError) Error() string {
	return "redlimit: the Cluster redirected to " + e.addr + ", which is not one of its primaries"
}

func evalArgs(name, script string, keys []string, args []any) []any {
	out := make([]any, 0, 3+len(keys)+len(args))
	out = append(out, name, script, len(keys))
	for _, k := range keys {
		out = append(out, k)
	}
	return append(out, args...)
}

// Eval is redis.Scripter's, following the Cluster's refusals.
func (r *Redirecting) Eval(ctx context.Context, script string, keys []string, args ...any) *redis.Cmd {
	return r.Do(ctx, evalArgs("eval", script, keys, args)...)
}

// EvalSha is redis.Scripter's, following the Cluster's refusals.
func (r *Redirecting) EvalSha(ctx context.Context, sha1 string, keys []string, args ...any) *redis.Cmd {
	return r.Do(ctx, evalArgs("evalsha", sha1, keys, args)...)
}

// EvalRO is redis.Scripter's, following the Cluster's refusals.
func (r *Redirecting) EvalRO(ctx context.Context, script string, keys []string, args ...any) *redis.Cmd {
	return r.Do(ctx, evalArgs("eval_ro", script, keys, args)...)
}

// EvalShaRO is redis.Scripter's, following the Cluster's refusals.
func (r *Redirecting) EvalShaRO(ctx context.Context, sha1 string, keys []string, args ...any) *redis.Cmd {
	return r.Do(ctx, evalArgs("evalsha_ro", sha1, keys, args)...)
}

// ScriptExists is the Cluster client's.
func (r *Redirecting) ScriptExists(ctx context.Context, hashes ...string) *redis.BoolSliceCmd {
	return r.cc.ScriptExists(ctx, hashes...)
}

// ScriptLoad is the Cluster client's.
func (r *Redirecting) ScriptLoad(ctx context.Context, script string) *redis.StringCmd {
	return r.cc.ScriptLoad(ctx, script)
}
