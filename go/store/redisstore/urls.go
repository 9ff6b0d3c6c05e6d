package redisstore

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"net/url"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ledger-bus/ledger-bus/go/model"
)

// A Redis URL as the Python package reads it (ledger_bus/store/urls.py and
// ledger_bus/store/redis/connection.py): redis://, rediss:// and unix:// as Redis clients
// take them; redis+cluster:// and redis+sentinel:// naming several nodes between the
// credentials and the path, H:P,H2:P2, which no URL parser takes: the list is read here, and
// the rest of the URL with the first node standing in for it.

// target is what a URL names: how to build the client, and the durability its query asks.
type target struct {
	scheme     string
	durability model.Durability
	// shown is the URL as errors name it: its password hidden.
	shown string
	// options is the client's settings as a redis:// URL of the first node gives them.
	options *redis.Options
	// nodes are a cluster's seeds or the sentinels, host:port, in the URL's order.
	nodes []string
	// master and sentinelPassword are a Sentinel URL's.
	master           string
	sentinelPassword string
}

// nodePattern is one node: an IPv6 address in brackets, or a name or an IPv4 address; then
// ":PORT" if it has one. Every SDK reads a node by this rule.
var nodePattern = regexp.MustCompile(`^(?:\[([0-9A-Fa-f:.]+)\]|([^\s:\[\]]+))(?::([0-9]+))?$`)

// urlParts is SCHEME://AUTHORITY REST: the authority ends at the first "/", "?" or "#".
var urlParts = regexp.MustCompile(`(?s)^([A-Za-z][A-Za-z0-9+.-]*):(//)?([^/?#]*)(.*)$`)

// parseURL reads a URL this package opens; an error of kind model.ErrInvalidInput for one it
// does not, before any connection is tried.
func parseURL(given string) (*target, error) {
	t := &target{shown: shownURL(given)}
	parts := urlParts.FindStringSubmatch(given)
	if parts == nil {
		return nil, model.Errorf(model.ErrInvalidInput, "not a URL: '%s'", t.shown)
	}
	t.scheme = strings.ToLower(parts[1])
	rest, err := t.splitDurability(given)
	if err != nil {
		return nil, err
	}
	switch t.scheme {
	case "redis", "rediss", "unix":
		t.options, err = clientOptions(rest, t.shown)
		return t, err
	case "redis+cluster", "rediss+cluster":
		return t, t.parseCluster(rest)
	case "redis+sentinel", "rediss+sentinel":
		return t, t.parseSentinel(rest)
	}
	return nil, model.Errorf(model.ErrInvalidInput, "unsupported URL '%s': use redis://, rediss://, "+
		"unix://, redis+cluster:// or redis+sentinel://", t.shown)
}

// splitDurability sets t.durability from the URL's durability and durability_timeout_ms (local
// when it has none) and returns the URL without them.
func (t *target) splitDurability(given string) (string, error) {
	base, query, _ := strings.Cut(given, "?")
	query, fragment, hasFragment := strings.Cut(query, "#")
	values, err := url.ParseQuery(query)
	if err != nil {
		return "", model.Errorf(model.ErrInvalidInput, "a malformed query in '%s': %v", t.shown, err)
	}
	level := values.Get("durability")
	if level == "" {
		level = "local"
	}
	wait := model.DefaultDurabilityTimeout
	if ms := values.Get("durability_timeout_ms"); ms != "" {
		n, err := strconv.ParseInt(ms, 10, 64)
		if err != nil || n < 0 {
			return "", model.Errorf(model.ErrInvalidInput, "durability_timeout_ms must be milliseconds: '%s'", t.shown)
		}
		wait = time.Duration(n) * time.Millisecond
	}
	if t.durability, err = model.ParseDurability(level, wait); err != nil {
		return "", err
	}
	values.Del("durability")
	values.Del("durability_timeout_ms")
	rest := base
	if encoded := values.Encode(); encoded != "" {
		rest += "?" + encoded
	}
	if hasFragment {
		rest += "#" + fragment
	}
	return rest, nil
}

// clientOptions are go-redis's options for a redis://, rediss:// or unix:// URL, the
// Python package's TLS parameters (ssl_ca_certs, ssl_certfile, ssl_keyfile: PEM files) read
// out of its query first.
func clientOptions(given, shown string) (*redis.Options, error) {
	rest, files, err := tlsFiles(given)
	if err != nil {
		return nil, err
	}
	options, err := redis.ParseURL(rest)
	if err != nil {
		return nil, model.Errorf(model.ErrInvalidInput, "%s: '%s'", err, shown)
	}
	if files != nil {
		if options.TLSConfig == nil {
			return nil, model.Errorf(model.ErrInvalidInput, "ssl_ca_certs, ssl_certfile and ssl_keyfile "+
				"are for rediss:// URLs: '%s'", shown)
		}
		if err := files.apply(options.TLSConfig); err != nil {
			return nil, err
		}
	}
	return options, nil
}

// pemFiles are the TLS files a URL names.
type pemFiles struct{ ca, cert, key string }

// tlsFiles takes the TLS parameters out of a URL's query: the URL without them, and the files
// (nil for none).
func tlsFiles(given string) (string, *pemFiles, error) {
	base, query, ok := strings.Cut(given, "?")
	if !ok {
		return given, nil, nil
	}
	values, err := url.ParseQuery(query)
	if err != nil {
		return "", nil, model.Errorf(model.ErrInvalidInput, "a malformed query in '%s': %v", shownURL(given), err)
	}
	files := &pemFiles{values.Get("ssl_ca_certs"), values.Get("ssl_certfile"), values.Get("ssl_keyfile")}
	if *files == (pemFiles{}) {
		return given, nil, nil
	}
	for _, name := range []string{"ssl_ca_certs", "ssl_certfile", "ssl_keyfile"} {
		values.Del(name)
	}
	if encoded := values.Encode(); encoded != "" {
		base += "?" + encoded
	}
	return base, files, nil
}

// apply adds the files to a TLS configuration: the CA that signed the server's certificate
// (besides the system's), and a client certificate for a server that asks for one.
func (f *pemFiles) apply(config *tls.Config) error {
	if f.ca != "" {
		pem, err := os.ReadFile(f.ca)
		if err != nil {
			return model.Errorf(model.ErrInvalidInput, "ssl_ca_certs: %v", err)
		}
		pool, err := x509.SystemCertPool()
		if err != nil {
			pool = x509.NewCertPool()
		}
		if !pool.AppendCertsFromPEM(pem) {
			return model.Errorf(model.ErrInvalidInput, "ssl_ca_certs: no PEM certificate in %s", f.ca)
		}
		config.RootCAs = pool
	}
	if f.cert != "" || f.key != "" {
		key := f.key
		if key == "" {
			key = f.cert // the key may follow the certificate in one file
		}
		pair, err := tls.LoadX509KeyPair(f.cert, key)
		if err != nil {
			return model.Errorf(model.ErrInvalidInput, "ssl_certfile/ssl_keyfile: %v", err)
		}
		config.Certificates = []tls.Certificate{pair}
	}
	return nil
}

// nodesOf reads the nodes of a URL, H:P,H2:P2 between its credentials and its path (an IPv6
// host in brackets), in order, a node without a port at defaultPort (0: the port is
// required); and the URL with its first node alone, the scheme's "+cluster" or "+sentinel"
// taken out. what names a node for the error ("a cluster seed").
func (t *target) nodesOf(given, what string, defaultPort int) (string, error) {
	parts := urlParts.FindStringSubmatch(given)
	if parts == nil || parts[2] == "" {
		return "", model.Errorf(model.ErrInvalidInput, "not a URL: '%s'", t.shown)
	}
	authority := parts[3]
	at := strings.LastIndex(authority, "@")
	credentials, list := authority[:at+1], authority[at+1:]
	for _, item := range strings.Split(list, ",") {
		node := nodePattern.FindStringSubmatch(item)
		port := defaultPort
		if node != nil && node[3] != "" {
			port, _ = strconv.Atoi(node[3])
		}
		if node == nil || port < 1 || port > 65535 {
			return "", model.Errorf(model.ErrInvalidInput, "%s is host:port, got '%s' in '%s'", what, item, t.shown)
		}
		t.nodes = append(t.nodes, net.JoinHostPort(node[1]+node[2], strconv.Itoa(port)))
	}
	scheme, _, _ := strings.Cut(t.scheme, "+")
	return scheme + "://" + credentials + t.nodes[0] + parts[4], nil
}

// parseCluster reads redis+cluster://[USER:PASS@]H:P,H2:P2/0?OPTIONS: the user, password, TLS
// and options are every node's; a seed without a port is at 6379.
func (t *target) parseCluster(given string) error {
	first, err := t.nodesOf(given, "a cluster seed", 6379)
	if err != nil {
		return err
	}
	if t.options, err = clientOptions(first, t.shown); err != nil {
		return err
	}
	if t.options.DB != 0 {
		return model.Errorf(model.ErrInvalidInput, "a Redis Cluster has one database, 0: '%s'", t.shown)
	}
	return nil
}

// parseSentinel reads redis+sentinel://[USER:PASS@]H:P,H2:P2/MASTER/DB?sentinel_password=...:
// the user and password are the data nodes', sentinel_password the sentinels'.
func (t *target) parseSentinel(given string) error {
	first, err := t.nodesOf(given, "a sentinel", 0)
	if err != nil {
		return err
	}
	base, query, _ := strings.Cut(first, "?")
	values, err := url.ParseQuery(query)
	if err != nil {
		return model.Errorf(model.ErrInvalidInput, "a malformed query in '%s': %v", t.shown, err)
	}
	t.sentinelPassword = values.Get("sentinel_password")
	values.Del("sentinel_password")
	parsed, err := url.Parse(base)
	if err != nil {
		return model.Errorf(model.ErrInvalidInput, "not a URL: '%s'", t.shown)
	}
	var names []string
	for _, name := range strings.Split(parsed.Path, "/") {
		if name != "" {
			names = append(names, name)
		}
	}
	db := "0"
	if len(names) == 2 {
		db = names[1]
	}
	if n, err := strconv.Atoi(db); len(names) == 0 || len(names) > 2 || err != nil || n < 0 {
		return model.Errorf(model.ErrInvalidInput, "a Sentinel URL names the primary and a database: "+
			"/MASTER/DB; '%s'", t.shown)
	}
	t.master = names[0]
	parsed.Path = "/" + db
	parsed.RawQuery = values.Encode()
	t.options, err = clientOptions(parsed.String(), t.shown)
	return err
}

// client builds the go-redis client the URL names. The store retries its calls itself, to a
// deadline of its own, so the client tries each once; a socket waits as long as the longest
// wait the store asks of the server.
func (t *target) client(timeout time.Duration, durability model.Durability) (redis.UniversalClient, error) {
	o := t.options
	dial := min(5*time.Second, timeout)
	read := dial + durability.Timeout
	// RESP2 as the Python package speaks it: its reply shapes are the ones the parsers know.
	o.Protocol = 2
	o.MaxRetries = -1
	o.DialTimeout, o.ReadTimeout, o.WriteTimeout = dial, read, read
	o.ContextTimeoutEnabled = true
	o.DialerRetries = 1
	o.DisableIdentity = true
	// A cluster and a Sentinel set take the same settings, through go-redis's own mapping.
	shared := &redis.UniversalOptions{
		Addrs:                 t.nodes,
		MasterName:            t.master,
		SentinelPassword:      t.sentinelPassword,
		Username:              o.Username,
		Password:              o.Password,
		DB:                    o.DB,
		TLSConfig:             o.TLSConfig,
		Protocol:              o.Protocol,
		MaxRetries:            -1,
		DialTimeout:           o.DialTimeout,
		ReadTimeout:           o.ReadTimeout,
		WriteTimeout:          o.WriteTimeout,
		ContextTimeoutEnabled: true,
		DialerRetries:         1,
		DisableIdentity:       true,
		PoolSize:              o.PoolSize,
	}
	switch t.scheme {
	case "redis+cluster", "rediss+cluster":
		cluster := shared.Cluster()
		if o.TLSConfig != nil {
			// Each node is verified under its own name, where go-redis would give every node
			// the first seed's.
			cluster.TLSConfig, cluster.Dialer = nil, tlsDialer(o.TLSConfig, dial)
		}
		return redis.NewClusterClient(cluster), nil
	case "redis+sentinel", "rediss+sentinel":
		return redis.NewFailoverClient(shared.Failover()), nil
	}
	return redis.NewClient(o), nil
}

// tlsDialer dials a node with TLS, verifying its certificate under the node's own host name.
func tlsDialer(config *tls.Config, timeout time.Duration) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c := config.Clone()
		c.ServerName = ""
		if host, _, err := net.SplitHostPort(addr); err == nil {
			c.ServerName = host
		}
		d := &tls.Dialer{NetDialer: &net.Dialer{Timeout: timeout, KeepAlive: 5 * time.Minute}, Config: c}
		return d.DialContext(ctx, network, addr)
	}
}

// readSlots has a cluster client read the slot map, retried until the store's timeout: a node
// that is not in cluster mode is refused at once, with the URL named.
func (s *Store) readSlots(ctx context.Context, shown string) error {
	err := s.do(ctx, "CLUSTER SLOTS", func(ctx context.Context) error {
		// A PING goes to a node of the slot map, which the client reads first from the
		// first seed that answers.
		return s.cluster.Ping(ctx).Err()
	})
	if err != nil && strings.Contains(err.Error(), "cluster support disabled") {
		return model.Errorf(model.ErrBackendRefused, "%s is not a Redis Cluster node; use redis:// for a "+
			"single server", shown)
	}
	return err
}

// shownURL is a URL as an error names it: its password, if any, hidden.
func shownURL(given string) string {
	parts := urlParts.FindStringSubmatch(given)
	if parts == nil {
		return given
	}
	authority := parts[3]
	at := strings.LastIndex(authority, "@")
	colon := strings.Index(authority, ":")
	if at < 0 || colon < 0 || colon > at {
		return given
	}
	return fmt.Sprintf("%s:%s%s:***%s%s", parts[1], parts[2], authority[:colon], authority[at:], parts[4])
}
