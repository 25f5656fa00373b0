package backend

import (
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"strings"

	"github.com/redis/go-redis/v9"
)

// redacted replaces a secret in anything this package prints; pgx and net/url use the same mark.
const redacted = "xxxxx"

// Redact returns addr, a host:port or a redis:// or rediss:// URL, as it may be printed: a
// password in the URL is replaced by "xxxxx". A string that does not parse as a URL but holds
// an "@" loses everything before the last "@", since a password may hide anywhere in it.
func Redact(addr string) string {
	if !strings.Contains(addr, "://") {
		return addr
	}
	u, err := url.Parse(addr)
	if err != nil {
		scheme, rest, _ := strings.Cut(addr, "://")
		if i := strings.LastIndex(rest, "@"); i >= 0 {
			return scheme + "://" + redacted + rest[i:]
		}
		return addr
	}
	return u.Redacted()
}

// server is one addrs server as the user named it.
type server struct {
	role    string
	shown   string // Redact of what the user wrote
	opts    *redis.Options
	secrets []string // passwords its options carry, to be scrubbed from errors
}

// parseServer reads addr, a host:port or a redis:// or rediss:// URL. password applies when
// the URL carries none; roots, when not nil, are the CAs a rediss:// server must chain to.
func parseServer(role, addr, password string, roots *x509.CertPool) (*server, error) {
	s := &server{role: role, shown: Redact(addr)}
	if !strings.Contains(addr, "://") {
		if err := checkHostPort(role, addr); err != nil {
			return nil, err
		}
		s.opts = &redis.Options{Addr: addr}
	} else {
		scheme, _, _ := strings.Cut(addr, "://")
		if scheme != "redis" && scheme != "rediss" {
			return nil, fmt.Errorf("%w: %s address %s: scheme %q, want redis or rediss", ErrConfig, role, s.shown, scheme)
		}
		opts, err := redis.ParseURL(addr)
		if err != nil {
			// net/url's errors quote the whole URL, password and all: keep only the reason.
			var uerr *url.Error
			if errors.As(err, &uerr) {
				err = uerr.Err
			}
			msg := scrub(err.Error(), userinfo(addr))
			return nil, fmt.Errorf("%w: %s address %s is not a Redis URL: %s", ErrConfig, role, s.shown, msg)
		}
		if host, port, err := net.SplitHostPort(opts.Addr); err != nil || host == "" || port == "" {
			return nil, fmt.Errorf("%w: %s address %s has no host", ErrConfig, role, s.shown)
		}
		s.opts = opts
	}
	if s.opts.Password == "" {
		s.opts.Password = password
	}
	if s.opts.Password != "" {
		s.secrets = append(s.secrets, s.opts.Password)
	}
	if s.opts.TLSConfig != nil && roots != nil {
		s.opts.TLSConfig.RootCAs = roots
	}
	return s, nil
}

// userinfo returns what stands between "://" and the last "@" of a URL that may not parse.
func userinfo(addr string) string {
	_, rest, _ := strings.Cut(addr, "://")
	if i := strings.LastIndex(rest, "@"); i >= 0 {
		return rest[:i]
	}
	return ""
}

// loadRoots reads a PEM file of CA certificates.
func loadRoots(path string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%w: TLS CA file: %v", ErrConfig, err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("%w: TLS CA file %s holds no PEM certificate", ErrConfig, path)
	}
	return pool, nil
}

// sameSettings reports whether two servers at one address would be reached the same way.
func sameSettings(a, b *redis.Options) bool {
	return a.Username == b.Username && a.Password == b.Password && a.DB == b.DB &&
		(a.TLSConfig == nil) == (b.TLSConfig == nil)
}

// cloneOptions copies o deeply enough that the caller may change any field.
func cloneOptions(o *redis.Options) *redis.Options {
	c := *o
	if o.TLSConfig != nil {
		c.TLSConfig = o.TLSConfig.Clone()
	}
	return &c
}

// scrub replaces each non-empty secret in msg.
func scrub(msg string, secrets ...string) string {
	for _, s := range secrets {
		if s != "" {
			msg = strings.ReplaceAll(msg, s, redacted)
		}
	}
	return msg
}

// scrubbedError is err with its secrets taken out of its message; errors.Is still sees err.
type scrubbedError struct {
	msg string
	err error
}

func (s *scrubbedError) Error() string { return s.msg }
func (s *scrubbedError) Unwrap() error { return s.err }

// scrubError returns err with secrets taken out of its message, or nil for nil.
func scrubError(err error, secrets []string) error {
	if err == nil {
		return nil
	}
	msg := err.Error()
	if clean := scrub(msg, secrets...); clean != msg {
		return &scrubbedError{msg: clean, err: err}
	}
	return err
}

// ServerOptions reads the servers of a command that talks to them directly (redlock-bench
// check): masters and, when fenceAddr is not empty, the fence counter, each a host:port or a
// redis:// or rediss:// URL. password applies to a URL without one; caFile, when not empty,
// holds the CAs a rediss:// server must chain to. Errors wrap ErrConfig and carry no password.
func ServerOptions(masters []string, fenceAddr, password, caFile string) ([]*redis.Options, *redis.Options, error) {
	var roots *x509.CertPool
	if caFile != "" {
		var err error
		if roots, err = loadRoots(caFile); err != nil {
			return nil, nil, err
		}
	}
	tls := false
	parse := func(role, addr string) (*redis.Options, error) {
		s, err := parseServer(role, addr, password, roots)
		if err != nil {
			return nil, err
		}
		tls = tls || s.opts.TLSConfig != nil
		return s.opts, nil
	}
	out := make([]*redis.Options, len(masters))
	for i, a := range masters {
		o, err := parse("master", a)
		if err != nil {
			return nil, nil, err
		}
		out[i] = o
	}
	var fence *redis.Options
	if fenceAddr != "" {
		var err error
		if fence, err = parse("fence", fenceAddr); err != nil {
			return nil, nil, err
		}
	}
	if roots != nil && !tls {
		return nil, nil, fmt.Errorf("%w: a TLS CA file is given but no address is rediss://", ErrConfig)
	}
	return out, fence, nil
}

// Unverified returns, redacted, the addresses among addrs whose URL turns
// certificate checks off (rediss://...?skip_verify=true): a TLS connection
// to them accepts any certificate, so whoever is on the path reads the
// tokens and can release the locks. Addresses that do not parse are left
// to the errors of the calls that read them.
func Unverified(addrs ...string) []string {
	var out []string
	for _, a := range addrs {
		if !strings.HasPrefix(a, "rediss://") {
			continue
		}
		if opts, err := redis.ParseURL(a); err == nil && opts.TLSConfig != nil && opts.TLSConfig.InsecureSkipVerify {
			out = append(out, Redact(a))
		}
	}
	return out
}
