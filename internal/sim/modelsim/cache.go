package modelsim

import (
	"container/list"
	"crypto/sha256"
	"sync"
	"time"
)

// Prompt caching, as the providers document it (see the package doc and
// docs/modelsim.md, "Prompt caching"). A prompt is a sequence of units in
// the provider's cache order; a prefix is remembered as the chained hash
// of its units, so any change in a unit changes the hash of every prefix
// that includes it.
const (
	// minCachedPrefix is the shortest prefix either provider caches.
	minCachedPrefix = 1024
	// openAICacheStep is the granularity of OpenAI's cache hits past the first 1024 tokens.
	openAICacheStep = 128
	// anthropicLookback is how many blocks, counting the breakpoint's own,
	// Anthropic checks for an earlier cache entry at each breakpoint.
	anthropicLookback = 20
	// cacheTTL is how long an entry lives unless it is read (which refreshes it).
	cacheTTL = 5 * time.Minute
	// maxCacheEntries bounds the memory: the least recently used entries go first.
	maxCacheEntries = 1 << 16
)

// unit is one block of a prompt: its tokens, the hash of the prompt up to
// and including it, and whether the request marks a cache breakpoint on it
// (Anthropic's cache_control).
type unit struct {
	tokens     int
	hash       [sha256.Size]byte
	breakpoint bool
}

// prompt builds a prompt's units in order, chaining their hashes.
type prompt struct {
	units []unit
	last  [sha256.Size]byte
}

// newPrompt starts a prompt in a cache namespace (the wire, the model, a
// cache key): prefixes of different namespaces never match.
func newPrompt(namespace ...string) *prompt {
	h := sha256.New()
	for _, n := range namespace {
		h.Write([]byte(n))
		h.Write([]byte{0})
	}
	p := &prompt{}
	h.Sum(p.last[:0])
	return p
}

// add appends a unit: canonical are its bytes as the cache compares them,
// tokens what it counts.
func (p *prompt) add(tokens int, breakpoint bool, canonical ...[]byte) {
	h := sha256.New()
	h.Write(p.last[:])
	for _, c := range canonical {
		h.Write(c)
		h.Write([]byte{0})
	}
	h.Sum(p.last[:0])
	p.units = append(p.units, unit{tokens: tokens, hash: p.last, breakpoint: breakpoint})
}

// tokens is the whole prompt's count.
func (p *prompt) tokens() int {
	n := 0
	for _, u := range p.units {
		n += u.tokens
	}
	return n
}

// upTo is the tokens of the prefix through unit i (0 for i = -1).
func (p *prompt) upTo(i int) int {
	n := 0
	for _, u := range p.units[:i+1] {
		n += u.tokens
	}
	return n
}

// textTokens is modelsim's tokenizer: four bytes of text a token, rounded up.
func textTokens(n int) int { return (n + bytesPerToken - 1) / bytesPerToken }

// promptCache is the server's cache of prefixes, by hash, with a TTL and an LRU bound.
type promptCache struct {
	mu      sync.Mutex
	entries map[[sha256.Size]byte]*list.Element
	lru     list.List // of *cacheEntry, most recently used first
	max     int
}

type cacheEntry struct {
	hash    [sha256.Size]byte
	expires time.Time
}

func newPromptCache(max int) *promptCache {
	return &promptCache{entries: map[[sha256.Size]byte]*list.Element{}, max: max}
}

// has reports whether the prefix is cached and live; a hit refreshes it.
func (c *promptCache) has(h [sha256.Size]byte, now time.Time) bool {
	e, ok := c.entries[h]
	if !ok {
		return false
	}
	ce := e.Value.(*cacheEntry)
	if !now.Before(ce.expires) {
		c.lru.Remove(e)
		delete(c.entries, h)
		return false
	}
	ce.expires = now.Add(cacheTTL)
	c.lru.MoveToFront(e)
	return true
}

// put caches a prefix (or refreshes it).
func (c *promptCache) put(h [sha256.Size]byte, now time.Time) {
	if e, ok := c.entries[h]; ok {
		e.Value.(*cacheEntry).expires = now.Add(cacheTTL)
		c.lru.MoveToFront(e)
		return
	}
	c.entries[h] = c.lru.PushFront(&cacheEntry{hash: h, expires: now.Add(cacheTTL)})
	for c.lru.Len() > c.max {
		old := c.lru.Back()
		c.lru.Remove(old)
		delete(c.entries, old.Value.(*cacheEntry).hash)
	}
}

// len is the number of entries, live or not yet evicted.
func (c *promptCache) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lru.Len()
}

// openAI applies OpenAI's automatic caching to a prompt and returns the
// cached tokens: the longest prefix, at a unit boundary, that an earlier
// prompt of at least 1024 tokens sent, counted as 1024 plus whole 128-token
// steps; nothing for a prompt under 1024 tokens. The prompt's own prefixes
// are cached for the next request.
func (c *promptCache) openAI(p *prompt, now time.Time) int {
	total := p.tokens()
	if total < minCachedPrefix {
		return 0
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	hit := 0
	for i := len(p.units) - 1; i >= 0; i-- {
		if c.has(p.units[i].hash, now) {
			hit = p.upTo(i)
			break
		}
	}
	for _, u := range p.units {
		c.put(u.hash, now)
	}
	return openAIGranular(hit)
}

// openAIGranular rounds a prefix down to what OpenAI reports as cached.
func openAIGranular(n int) int {
	if n < minCachedPrefix {
		return 0
	}
	return minCachedPrefix + (n-minCachedPrefix)/openAICacheStep*openAICacheStep
}

// cacheUse is what a request read from and wrote to an Anthropic-style cache.
type cacheUse struct {
	read, written, uncached int
}

// anthropic applies Anthropic's caching: only at breakpoints. Each
// breakpoint looks back over its own block and the 19 before it for the
// longest prefix already cached (a read, which refreshes it); every
// breakpoint after the read that ends a prefix of at least 1024 tokens
// writes it. Uncached are the tokens after the last cache point.
func (c *promptCache) anthropic(p *prompt, now time.Time) cacheUse {
	c.mu.Lock()
	defer c.mu.Unlock()
	read := -1
	for b, u := range p.units {
		if !u.breakpoint {
			continue
		}
		for j := b; j > b-anthropicLookback && j > read; j-- {
			if c.has(p.units[j].hash, now) {
				read = j
				break
			}
		}
	}
	written := read
	for b, u := range p.units {
		if u.breakpoint && b > read && p.upTo(b) >= minCachedPrefix {
			c.put(u.hash, now)
			written = b
		}
	}
	r, w := p.upTo(read), p.upTo(written)
	return cacheUse{read: r, written: w - r, uncached: p.tokens() - w}
}
