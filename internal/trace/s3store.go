package trace

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
)

// S3Config names a bucket of an S3-compatible object store.
type S3Config struct {
	// Endpoint is host[:port], without a scheme.
	Endpoint string
	// Insecure speaks plain HTTP to the endpoint.
	Insecure bool
	Bucket   string
	Region   string
	// Prefix is prepended to every key, so several servers can share a bucket.
	Prefix string
	// AccessKey and SecretKey; both empty reads AWS_ACCESS_KEY_ID and
	// AWS_SECRET_ACCESS_KEY (and AWS_SESSION_TOKEN) from the environment.
	AccessKey, SecretKey string
}

// S3Store keeps objects in an S3-compatible bucket (minio-go), for farms
// whose traces outgrow one volume; several servers can then share it.
type S3Store struct {
	c      *minio.Client
	bucket string
	prefix string
}

// NewS3Store connects to the bucket and checks it exists.
func NewS3Store(ctx context.Context, cfg S3Config) (*S3Store, error) {
	if cfg.Endpoint == "" || cfg.Bucket == "" {
		return nil, errors.New("an S3 store needs an endpoint and a bucket")
	}
	if strings.Contains(cfg.Endpoint, "://") {
		return nil, fmt.Errorf("S3 endpoint %q: give host[:port], without a scheme (plain HTTP is the insecure setting)", cfg.Endpoint)
	}
	if cfg.Prefix != "" {
		if err := CheckKey(cfg.Prefix, true); err != nil {
			return nil, fmt.Errorf("S3 prefix: %w", err)
		}
	}
	creds := credentials.NewEnvAWS()
	if cfg.AccessKey != "" || cfg.SecretKey != "" {
		creds = credentials.NewStaticV4(cfg.AccessKey, cfg.SecretKey, "")
	}
	c, err := minio.New(cfg.Endpoint, &minio.Options{Creds: creds, Secure: !cfg.Insecure, Region: cfg.Region})
	if err != nil {
		return nil, fmt.Errorf("S3 %s: %w", cfg.Endpoint, err)
	}
	ok, err := c.BucketExists(ctx, cfg.Bucket)
	if err != nil {
		return nil, fmt.Errorf("S3 bucket %s at %s: %w", cfg.Bucket, cfg.Endpoint, err)
	}
	if !ok {
		return nil, fmt.Errorf("S3 bucket %s does not exist at %s: create it first", cfg.Bucket, cfg.Endpoint)
	}
	return &S3Store{c: c, bucket: cfg.Bucket, prefix: cfg.Prefix}, nil
}

// Put writes an object.
func (s *S3Store) Put(ctx context.Context, key string, data []byte) error {
	if err := CheckKey(key, false); err != nil {
		return err
	}
	_, err := s.c.PutObject(ctx, s.bucket, s.prefix+key, bytes.NewReader(data), int64(len(data)),
		minio.PutObjectOptions{ContentType: http.DetectContentType(data)})
	return err
}

// Get opens an object.
func (s *S3Store) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	if err := CheckKey(key, false); err != nil {
		return nil, err
	}
	obj, err := s.c.GetObject(ctx, s.bucket, s.prefix+key, minio.GetObjectOptions{})
	if err == nil {
		_, err = obj.Stat() // GetObject is lazy: this is where a missing key shows
	}
	if err != nil {
		if obj != nil {
			obj.Close()
		}
		if minio.ToErrorResponse(err).Code == minio.NoSuchKey {
			return nil, fmt.Errorf("%s: %w", key, ErrNotFound)
		}
		return nil, err
	}
	return obj, nil
}

// List returns the objects under prefix, sorted by key.
func (s *S3Store) List(ctx context.Context, prefix string) ([]Object, error) {
	if err := CheckKey(prefix, true); err != nil {
		return nil, err
	}
	var out []Object
	for o := range s.c.ListObjects(ctx, s.bucket, minio.ListObjectsOptions{Prefix: s.prefix + prefix, Recursive: true}) {
		if o.Err != nil {
			return nil, o.Err
		}
		out = append(out, Object{Key: strings.TrimPrefix(o.Key, s.prefix), Size: o.Size, ModTime: o.LastModified})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out, nil
}

// DeletePrefix removes every object under prefix.
func (s *S3Store) DeletePrefix(ctx context.Context, prefix string) error {
	if err := CheckKey(prefix, true); err != nil {
		return err
	}
	if prefix == "" {
		return errors.New("refusing to delete the whole store")
	}
	ctx, cancel := context.WithCancel(ctx) // stops the lister if removal ends early
	defer cancel()
	objs := make(chan minio.ObjectInfo)
	var listErr error
	go func() {
		defer close(objs)
		for o := range s.c.ListObjects(ctx, s.bucket, minio.ListObjectsOptions{Prefix: s.prefix + prefix, Recursive: true}) {
			if o.Err != nil {
				listErr = o.Err
				return
			}
			select {
			case objs <- o:
			case <-ctx.Done():
				return
			}
		}
	}()
	for e := range s.c.RemoveObjects(ctx, s.bucket, objs, minio.RemoveObjectsOptions{}) {
		if e.Err != nil {
			return fmt.Errorf("delete %s: %w", e.ObjectName, e.Err)
		}
	}
	return listErr // objs is closed: the lister has returned
}
