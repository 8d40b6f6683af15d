package provider

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"sync"
	"time"
)

// Transport is the HTTP client the adapters share. It adds what the vendors'
// clients leave out: the model idle watchdog over the response stream, the
// response headers of a failed request (for Retry-After), the request size,
// and an optional last rewrite of the request body.
type Transport struct {
	Client      *http.Client
	IdleTimeout time.Duration
	// RewriteBody, when set, may change the encoded request body before it is sent.
	RewriteBody func([]byte) []byte
}

// NewTransport builds a Transport whose connection and header timeouts follow
// the idle timeout.
func NewTransport(o Options) *Transport {
	o = o.WithDefaults()
	if o.HTTPClient != nil {
		return &Transport{Client: o.HTTPClient, IdleTimeout: o.IdleTimeout}
	}
	tr := &http.Transport{
		Proxy:                 http.ProxyFromEnvironment,
		DialContext:           (&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		TLSHandshakeTimeout:   15 * time.Second,
		ResponseHeaderTimeout: o.IdleTimeout,
		MaxIdleConnsPerHost:   4,
		IdleConnTimeout:       90 * time.Second,
		ForceAttemptHTTP2:     true,
	}
	return &Transport{Client: &http.Client{Transport: tr, Timeout: o.RequestTimeout}, IdleTimeout: o.IdleTimeout}
}

// Exchange records what happened to one request.
type Exchange struct {
	mu           sync.Mutex
	Status       int
	Header       http.Header
	RequestBytes int
	idled        bool
}

type exchangeKey struct{}

// WithExchange returns a context that records the exchange of the request made with it.
func WithExchange(ctx context.Context) (context.Context, *Exchange) {
	x := &Exchange{}
	return context.WithValue(ctx, exchangeKey{}, x), x
}

// Idled reports whether the idle watchdog aborted the exchange.
func (x *Exchange) Idled() bool {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.idled
}

// Do sends req, watching it for idleness.
func (t *Transport) Do(req *http.Request) (*http.Response, error) {
	x, _ := req.Context().Value(exchangeKey{}).(*Exchange)
	if x == nil {
		x = &Exchange{}
	}
	if sp := SplicerFrom(req.Context()); req.Body != nil && (t.RewriteBody != nil || sp != nil || req.ContentLength <= 0) {
		var b []byte
		var err error
		if req.ContentLength > 0 {
			b = make([]byte, req.ContentLength)
			_, err = io.ReadFull(req.Body, b)
		} else {
			b, err = io.ReadAll(req.Body)
		}
		req.Body.Close()
		if err != nil {
			return nil, err
		}
		if sp == nil || sp.Len() == 0 {
			if t.RewriteBody != nil {
				b = t.RewriteBody(b)
			}
			req.Body = io.NopCloser(bytes.NewReader(b))
			req.ContentLength = int64(len(b))
			req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil }
		} else {
			open, size := sp.Body(b, t.RewriteBody)
			req.Body = io.NopCloser(open())
			req.ContentLength = size
			req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(open()), nil }
		}
	}
	x.mu.Lock()
	x.RequestBytes = int(req.ContentLength)
	x.mu.Unlock()

	ctx, cancel := context.WithCancelCause(req.Context())
	req = req.WithContext(ctx)
	var timer *time.Timer
	if t.IdleTimeout > 0 {
		timer = time.AfterFunc(t.IdleTimeout, func() {
			x.mu.Lock()
			x.idled = true
			x.mu.Unlock()
			cancel(ErrIdleTimeout)
		})
	}
	stop := func() {
		if timer != nil {
			timer.Stop()
		}
		cancel(nil)
	}
	resp, err := t.Client.Do(req)
	if err != nil {
		stop()
		if x.Idled() {
			return nil, ErrIdleTimeout
		}
		return nil, err
	}
	x.mu.Lock()
	x.Status = resp.StatusCode
	x.Header = resp.Header.Clone()
	x.mu.Unlock()
	if timer != nil {
		timer.Reset(t.IdleTimeout)
	}
	resp.Body = &idleBody{rc: resp.Body, timer: timer, idle: t.IdleTimeout, x: x, stop: stop}
	return resp, nil
}

// idleBody resets the idle timer on every read that brings data.
type idleBody struct {
	rc    io.ReadCloser
	timer *time.Timer
	idle  time.Duration
	x     *Exchange
	stop  func()
	once  sync.Once
}

func (b *idleBody) Read(p []byte) (int, error) {
	n, err := b.rc.Read(p)
	if n > 0 && b.timer != nil {
		b.timer.Reset(b.idle)
	}
	if err != nil && err != io.EOF && b.x.Idled() {
		return n, ErrIdleTimeout
	}
	return n, err
}

func (b *idleBody) Close() error {
	b.once.Do(b.stop)
	return b.rc.Close()
}

// RetryAfterFrom sets *d from the exchange's Retry-After header, when there is one.
func (x *Exchange) RetryAfterFrom(d *time.Duration, now time.Time) {
	x.mu.Lock()
	h := x.Header
	x.mu.Unlock()
	if v := ParseRetryAfter(h, now); v > 0 {
		*d = v
	}
}
