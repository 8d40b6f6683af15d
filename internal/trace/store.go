package trace

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// ErrNotFound is a Store's answer for a key it does not hold.
var ErrNotFound = errors.New("not found")

// Object is one stored object as a listing shows it.
type Object struct {
	Key     string
	Size    int64
	ModTime time.Time
}

// Store keeps traces as objects under slash-separated keys. Keys never start
// with a slash and never hold "." or ".." segments; a prefix names a folder
// and ends with a slash ("" is the whole store).
type Store interface {
	Put(ctx context.Context, key string, data []byte) error
	// Get opens an object; a missing one is ErrNotFound.
	Get(ctx context.Context, key string) (io.ReadCloser, error)
	// List returns every object under prefix, sorted by key.
	List(ctx context.Context, prefix string) ([]Object, error)
	// DeletePrefix removes every object under prefix.
	DeletePrefix(ctx context.Context, prefix string) error
}

// CheckKey refuses keys that could leave the store's root or be ambiguous.
func CheckKey(key string, prefix bool) error {
	if prefix && key == "" {
		return nil
	}
	body := key
	if prefix {
		if !strings.HasSuffix(key, "/") {
			return fmt.Errorf("prefix %q must end with /", key)
		}
		body = strings.TrimSuffix(key, "/")
	}
	if body == "" || strings.HasPrefix(body, "/") || strings.ContainsAny(body, "\\\x00") {
		return fmt.Errorf("bad key %q", key)
	}
	for _, seg := range strings.Split(body, "/") {
		if seg == "" || seg == "." || seg == ".." {
			return fmt.Errorf("bad key %q", key)
		}
	}
	return nil
}

// FSStore keeps objects as files under a root directory (a PersistentVolume
// in the chart). Writes go to a temporary file renamed into place, so a
// reader never sees half an object.
type FSStore struct{ Root string }

// NewFSStore creates root if needed.
func NewFSStore(root string) (*FSStore, error) {
	if err := os.MkdirAll(root, 0o755); err != nil {
		return nil, fmt.Errorf("trace store %s: %w", root, err)
	}
	return &FSStore{Root: root}, nil
}

func (s *FSStore) path(key string) string {
	return filepath.Join(s.Root, filepath.FromSlash(key))
}

// Put writes an object, replacing one of the same key.
func (s *FSStore) Put(_ context.Context, key string, data []byte) error {
	if err := CheckKey(key, false); err != nil {
		return err
	}
	p := s.path(key)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return err
	}
	f, err := os.CreateTemp(filepath.Dir(p), ".put-*")
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		os.Remove(f.Name())
		return err
	}
	if err := f.Close(); err != nil {
		os.Remove(f.Name())
		return err
	}
	if err := os.Rename(f.Name(), p); err != nil {
		os.Remove(f.Name())
		return err
	}
	return nil
}

// Get opens an object.
func (s *FSStore) Get(_ context.Context, key string) (io.ReadCloser, error) {
	if err := CheckKey(key, false); err != nil {
		return nil, err
	}
	f, err := os.Open(s.path(key))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%s: %w", key, ErrNotFound)
	}
	return f, err
}

// List walks the folder the prefix names.
func (s *FSStore) List(_ context.Context, prefix string) ([]Object, error) {
	if err := CheckKey(prefix, true); err != nil {
		return nil, err
	}
	var out []Object
	root := s.path(prefix)
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		if d.IsDir() || strings.HasPrefix(d.Name(), ".put-") {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return nil // removed while walking
		}
		rel, err := filepath.Rel(s.Root, p)
		if err != nil {
			return err
		}
		out = append(out, Object{Key: filepath.ToSlash(rel), Size: info.Size(), ModTime: info.ModTime()})
		return nil
	})
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out, err
}

// DeletePrefix removes the folder the prefix names.
func (s *FSStore) DeletePrefix(_ context.Context, prefix string) error {
	if err := CheckKey(prefix, true); err != nil {
		return err
	}
	if prefix == "" {
		return errors.New("refusing to delete the whole store")
	}
	return os.RemoveAll(s.path(prefix))
}
