package overrides

import (
	"context"
	"fmt"
	"strconv"

	"github.com/redis/rueidis"
)

// On Redis the entries of a Set are a hash, ID to JSON, beside a version
// counter that every change increments; both keys share one hash tag, so
// the scripts below run on a cluster too. A Set asks for the version every
// poll and reads the hash only when it changed. The keys' names are in
// Options.Prefix's documentation.
var (
	putScript = rueidis.NewLuaScript(`redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
return redis.call('INCR', KEYS[2])`)
	delScript = rueidis.NewLuaScript(`local n = redis.call('HDEL', KEYS[1], ARGV[1])
if n > 0 then redis.call('INCR', KEYS[2]) end
return n`)
	pruneScript = rueidis.NewLuaScript(`if redis.call('HGET', KEYS[1], ARGV[1]) ~= ARGV[2] then return 0 end
redis.call('HDEL', KEYS[1], ARGV[1])
redis.call('INCR', KEYS[2])
return 1`)
	loadScript = rueidis.NewLuaScript(`return {redis.call('GET', KEYS[2]) or '0', redis.call('HGETALL', KEYS[1])}`)
)

// newRedis returns a backend on the hash named hash; its version key
// shares the hash tag.
func newRedis(client func() rueidis.Client, hash string) *redis {
	return &redis{client: client, keys: []string{hash, hash + ":version"}}
}

type redis struct {
	client func() rueidis.Client
	keys   []string // the hash, the version
}

func (b *redis) conn() (rueidis.Client, error) {
	c := b.client()
	if c == nil {
		return nil, ErrNotConnected
	}
	return c, nil
}

func (b *redis) version(ctx context.Context) (int64, error) {
	c, err := b.conn()
	if err != nil {
		return 0, err
	}
	v, err := c.Do(ctx, c.B().Get().Key(b.keys[1]).Build()).AsInt64()
	if rueidis.IsRedisNil(err) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("overrides: reading the version: %w", err)
	}
	return v, nil
}

func (b *redis) load(ctx context.Context) (map[string][]byte, int64, error) {
	c, err := b.conn()
	if err != nil {
		return nil, 0, err
	}
	res, err := loadScript.Exec(ctx, c, b.keys, nil).ToArray()
	if err != nil || len(res) != 2 {
		return nil, 0, fmt.Errorf("overrides: reading: %w (%d results)", err, len(res))
	}
	vs, err := res[0].ToString()
	if err != nil {
		return nil, 0, fmt.Errorf("overrides: reading the version: %w", err)
	}
	v, err := strconv.ParseInt(vs, 10, 64)
	if err != nil {
		return nil, 0, fmt.Errorf("overrides: version %q: %w", vs, err)
	}
	flat, err := res[1].AsStrSlice()
	if err != nil {
		return nil, 0, fmt.Errorf("overrides: reading: %w", err)
	}
	m := make(map[string][]byte, len(flat)/2)
	for i := 0; i+1 < len(flat); i += 2 {
		m[flat[i]] = []byte(flat[i+1])
	}
	return m, v, nil
}

func (b *redis) put(ctx context.Context, id string, data []byte) error {
	c, err := b.conn()
	if err != nil {
		return err
	}
	if err := putScript.Exec(ctx, c, b.keys, []string{id, string(data)}).Error(); err != nil {
		return fmt.Errorf("overrides: storing: %w", err)
	}
	return nil
}

func (b *redis) del(ctx context.Context, id string) (bool, error) {
	c, err := b.conn()
	if err != nil {
		return false, err
	}
	n, err := delScript.Exec(ctx, c, b.keys, []string{id}).AsInt64()
	if err != nil {
		return false, fmt.Errorf("overrides: removing: %w", err)
	}
	return n > 0, nil
}

func (b *redis) prune(ctx context.Context, id string, data []byte) (bool, error) {
	c, err := b.conn()
	if err != nil {
		return false, err
	}
	n, err := pruneScript.Exec(ctx, c, b.keys, []string{id, string(data)}).AsInt64()
	if err != nil {
		return false, fmt.Errorf("overrides: removing an ended override: %w", err)
	}
	return n > 0, nil
}
