package rls

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"go.yaml.in/yaml/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluice-rl/sluice/limit"
)

// Rules are the rate limit domains of envoyproxy/ratelimit configuration
// files, compiled for matching. A *Rules is immutable and safe for
// concurrent use; it is its own RuleSource.
type Rules struct {
	domains map[string]*children
}

// Current returns r, so that a fixed *Rules can serve as Config.Rules.
func (r *Rules) Current() *Rules { return r }

// Domains lists the configured domains, sorted.
func (r *Rules) Domains() []string {
	return slices.Sorted(maps.Keys(r.domains))
}

// children are the descriptors configured at one level, by entry key.
type children map[string]*keyed

// keyed are the descriptors of one level that share an entry key: those
// with a value, those whose value holds a '*' (most literal bytes first),
// and the one without a value, which matches any value. A request entry
// takes the most specific: exact value, then wildcard, then any.
type keyed struct {
	exact map[string]*node
	wild  []*node
	any   *node
}

// node is one configured descriptor.
type node struct {
	key, value string // value is the pattern of a wildcard, '*' included
	wildcard   bool   // value holds a '*', which matches any run of bytes
	share      bool   // share_threshold: all values the wildcard matches share one counter
	rule       *rule  // nil: no rate_limit block
	shadow     bool
	detailed   bool   // detailed_metric: the metric names the request's value
	metric     string // the metric name of this node's path, without the domain
	next       children
}

// rule is a descriptor's rate_limit block.
type rule struct {
	name      string   // for replaces; may be empty
	replaces  []string // names of the rules this one replaces
	unlimited bool
	blocked   bool // requests_per_unit 0: every request is over the limit
	limit     limit.Limit
	// current is what a DescriptorStatus reports as the current limit.
	current *rlsv3.RateLimitResponse_RateLimit
}

// units maps envoyproxy/ratelimit's unit names to periods. Months and years
// are 30 and 365 days, as in envoyproxy/ratelimit.
var units = map[string]struct {
	period time.Duration
	enum   rlsv3.RateLimitResponse_RateLimit_Unit
}{
	"second": {time.Second, rlsv3.RateLimitResponse_RateLimit_SECOND},
	"minute": {time.Minute, rlsv3.RateLimitResponse_RateLimit_MINUTE},
	"hour":   {time.Hour, rlsv3.RateLimitResponse_RateLimit_HOUR},
	"day":    {24 * time.Hour, rlsv3.RateLimitResponse_RateLimit_DAY},
	"week":   {7 * 24 * time.Hour, rlsv3.RateLimitResponse_RateLimit_WEEK},
	"month":  {30 * 24 * time.Hour, rlsv3.RateLimitResponse_RateLimit_MONTH},
	"year":   {365 * 24 * time.Hour, rlsv3.RateLimitResponse_RateLimit_YEAR},
}

// DefaultAlgorithm is the algorithm of a rate_limit block without the
// algorithm extension: a sliding window admits about requests_per_unit in
// any window of one unit, without the double burst a fixed window allows
// at its boundary.
const DefaultAlgorithm = limit.SlidingWindow

// LoadRules reads path: one configuration file, or a directory whose
// *.yaml and *.yml files (not those starting with '.') each configure one
// domain. It returns the warnings about what sluice ignored, and an error
// naming the file, line and field of the first problem.
func LoadRules(path string) (*Rules, []string, error) {
	files, err := readConfig(path)
	if err != nil {
		return nil, nil, err
	}
	return compile(files)
}

// compile compiles the domains of files into one Rules.
func compile(files []configFile) (*Rules, []string, error) {
	r := &Rules{domains: map[string]*children{}}
	var warnings []string
	for _, f := range files {
		w, err := r.add(f.name, f.data)
		warnings = append(warnings, w...)
		if err != nil {
			return nil, warnings, err
		}
	}
	return r, warnings, nil
}

// ParseRules compiles one configuration file's data; name is used in
// errors and warnings.
func ParseRules(name string, data []byte) (*Rules, []string, error) {
	return compile([]configFile{{name, data}})
}

type configFile struct {
	name string
	data []byte
}

// maxConfigFile bounds one configuration file: far above any real one.
const maxConfigFile = 16 << 20

// readConfig reads the configuration files at path.
func readConfig(path string) ([]configFile, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("rls config: %w", err)
	}
	names := []string{path}
	if fi.IsDir() {
		ents, err := os.ReadDir(path)
		if err != nil {
			return nil, fmt.Errorf("rls config: %w", err)
		}
		names = names[:0]
		for _, e := range ents {
			n := e.Name()
			if strings.HasPrefix(n, ".") || e.IsDir() || (filepath.Ext(n) != ".yaml" && filepath.Ext(n) != ".yml") {
				continue
			}
			names = append(names, filepath.Join(path, n))
		}
		if len(names) == 0 {
			return nil, fmt.Errorf("rls config: directory %s holds no .yaml or .yml file", path)
		}
	}
	files := make([]configFile, 0, len(names))
	for _, n := range names {
		f, err := os.Open(n)
		if err != nil {
			return nil, fmt.Errorf("rls config: %w", err)
		}
		data, err := io.ReadAll(io.LimitReader(f, maxConfigFile+1))
		f.Close()
		if err != nil {
			return nil, fmt.Errorf("rls config: read %s: %w", n, err)
		}
		if len(data) > maxConfigFile {
			return nil, fmt.Errorf("rls config: %s is larger than %d bytes", n, maxConfigFile)
		}
		files = append(files, configFile{n, data})
	}
	return files, nil
}

// parser compiles one file and collects its warnings.
type parser struct {
	file     string
	warnings []string
}

func (p *parser) errorf(n *yaml.Node, format string, args ...any) error {
	return fmt.Errorf("%s:%d: %s", p.file, n.Line, fmt.Sprintf(format, args...))
}

func (p *parser) warnf(n *yaml.Node, format string, args ...any) {
	p.warnings = append(p.warnings, fmt.Sprintf("%s:%d: %s", p.file, n.Line, fmt.Sprintf(format, args...)))
}

// add compiles one file's domain into r.
func (r *Rules) add(file string, data []byte) ([]string, error) {
	p := &parser{file: file}
	var doc yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("%s: empty file: want a domain and its descriptors", file)
		}
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	if err := dec.Decode(new(yaml.Node)); !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("%s: more than one YAML document; put each domain in its own file", file)
	}
	top := &doc
	if top.Kind == yaml.DocumentNode && len(top.Content) == 1 {
		top = top.Content[0]
	}
	if top.Kind != yaml.MappingNode {
		return nil, p.errorf(top, "want a mapping with domain and descriptors")
	}
	var domain string
	var descs *yaml.Node
	for k, v := range pairs(top) {
		switch k.Value {
		case "domain":
			if v.Kind != yaml.ScalarNode || v.Value == "" {
				return p.warnings, p.errorf(v, "domain must be a non-empty string")
			}
			domain = v.Value
		case "descriptors":
			descs = v
		default:
			p.warnf(k, "ignoring unknown field %q", k.Value)
		}
	}
	if domain == "" {
		return p.warnings, p.errorf(top, "no domain")
	}
	if _, dup := r.domains[domain]; dup {
		return p.warnings, p.errorf(top, "domain %q is configured twice", domain)
	}
	c, err := p.descriptors(descs, "", 1)
	if err != nil {
		return p.warnings, err
	}
	r.domains[domain] = &c
	return p.warnings, nil
}

// pairs yields the keys and values of a mapping node.
func pairs(m *yaml.Node) func(yield func(k, v *yaml.Node) bool) {
	return func(yield func(k, v *yaml.Node) bool) {
		for i := 0; i+1 < len(m.Content); i += 2 {
			if !yield(m.Content[i], m.Content[i+1]) {
				return
			}
		}
	}
}

// literal is how many bytes of a wildcard pattern are not '*': the more,
// the more specific the pattern.
func literal(pattern string) int {
	return len(pattern) - strings.Count(pattern, "*")
}

// maxDepth bounds nesting: envoy sends at most a few entries a descriptor.
const maxDepth = 16

// descriptors compiles a descriptor list at depth (1 for the top level);
// prefix is the metric name of the parent.
func (p *parser) descriptors(list *yaml.Node, prefix string, depth int) (children, error) {
	c := children{}
	if list == nil || list.Tag == "!!null" {
		return c, nil
	}
	if list.Kind != yaml.SequenceNode {
		return nil, p.errorf(list, "descriptors must be a list")
	}
	if depth > maxDepth {
		return nil, p.errorf(list, "descriptors nested deeper than %d levels", maxDepth)
	}
	for _, item := range list.Content {
		n, err := p.descriptor(item, prefix, depth)
		if err != nil {
			return nil, err
		}
		k := c[n.key]
		if k == nil {
			k = &keyed{exact: map[string]*node{}}
			c[n.key] = k
		}
		switch {
		case n.wildcard:
			if slices.ContainsFunc(k.wild, func(o *node) bool { return o.value == n.value }) {
				return nil, p.errorf(item, "descriptor %s=%s is configured twice at this level", n.key, n.value)
			}
			k.wild = append(k.wild, n)
			slices.SortStableFunc(k.wild, func(a, b *node) int { return cmp.Compare(literal(b.value), literal(a.value)) })
		case n.value == "":
			if k.any != nil {
				return nil, p.errorf(item, "descriptor with key %q and no value is configured twice at this level", n.key)
			}
			k.any = n
		default:
			if k.exact[n.value] != nil {
				return nil, p.errorf(item, "descriptor %s=%s is configured twice at this level", n.key, n.value)
			}
			k.exact[n.value] = n
		}
	}
	return c, nil
}

// descriptor compiles one descriptor and its nested ones.
func (p *parser) descriptor(item *yaml.Node, prefix string, depth int) (*node, error) {
	if item.Kind != yaml.MappingNode {
		return nil, p.errorf(item, "a descriptor must be a mapping with a key")
	}
	n := &node{}
	var rl, nested, shareN *yaml.Node
	for k, v := range pairs(item) {
		switch k.Value {
		case "key":
			n.key = v.Value
		case "value":
			n.value = v.Value
		case "rate_limit":
			rl = v
		case "descriptors":
			nested = v
		case "shadow_mode":
			if err := v.Decode(&n.shadow); err != nil {
				return nil, p.errorf(v, "shadow_mode must be true or false")
			}
		case "share_threshold":
			if err := v.Decode(&n.share); err != nil {
				return nil, p.errorf(v, "share_threshold must be true or false")
			}
			shareN = k
		case "detailed_metric":
			if err := v.Decode(&n.detailed); err != nil {
				return nil, p.errorf(v, "detailed_metric must be true or false")
			}
		case "quota_mode":
			p.warnf(k, "ignoring quota_mode: sluice does not support quota mode")
		default:
			p.warnf(k, "ignoring unknown descriptor field %q", k.Value)
		}
	}
	if n.key == "" {
		return nil, p.errorf(item, "descriptor has no key")
	}
	n.wildcard = strings.Contains(n.value, "*")
	switch {
	case !n.share || n.wildcard:
	case n.value == "":
		// Without a value each value counts alone; sharing needs value: "*".
		return nil, p.errorf(shareN, "descriptor with key %q: share_threshold needs a value with a '*' wildcard (value: \"*\" shares one counter among all values)", n.key)
	default:
		p.warnf(shareN, "descriptor %s=%s: share_threshold has no effect on a value without '*'", n.key, n.value)
		n.share = false
	}
	n.metric = n.segment("")
	if prefix != "" {
		n.metric = prefix + "." + n.metric
	}
	if rl != nil {
		r, err := p.rateLimit(rl, n.metric)
		if err != nil {
			return nil, err
		}
		n.rule = r
	}
	next, err := p.descriptors(nested, n.metric, depth+1)
	if err != nil {
		return nil, err
	}
	n.next = next
	return n, nil
}

// rateLimit compiles a rate_limit block, with sluice's extensions:
// algorithm, burst and fail_mode.
func (p *parser) rateLimit(m *yaml.Node, what string) (*rule, error) {
	if m.Kind != yaml.MappingNode {
		return nil, p.errorf(m, "rate_limit must be a mapping")
	}
	r := &rule{}
	var (
		unit           string
		rpu            *uint32
		mult           uint32 = 1
		burst          int64
		alg            = DefaultAlgorithm
		algSet, burstN *yaml.Node
	)
	for k, v := range pairs(m) {
		var err error
		switch k.Value {
		case "name":
			r.name = v.Value
		case "replaces":
			if v.Kind != yaml.SequenceNode {
				return nil, p.errorf(v, "replaces must be a list of {name: ...}")
			}
			for _, e := range v.Content {
				var rep struct{ Name string }
				if err := e.Decode(&rep); err != nil || rep.Name == "" {
					return nil, p.errorf(e, "each replaces entry must be {name: <a rate_limit name>}")
				}
				r.replaces = append(r.replaces, rep.Name)
			}
		case "unit":
			unit = strings.ToLower(v.Value)
		case "requests_per_unit":
			rpu = new(uint32)
			err = v.Decode(rpu)
		case "unit_multiplier":
			err = v.Decode(&mult)
			if err == nil && mult == 0 {
				err = errors.New("zero")
			}
		case "unlimited":
			err = v.Decode(&r.unlimited)
		case "algorithm":
			alg, algSet = limit.Algorithm(v.Value), v
		case "burst":
			err = v.Decode(&burst)
			if err == nil && burst <= 0 {
				err = errors.New("not positive")
			}
			burstN = v
		case "fail_mode":
			switch v.Value {
			case "open":
			case "closed":
				r.limit.FailClosed = true
			default:
				return nil, p.errorf(v, "fail_mode %q: want open or closed", v.Value)
			}
		default:
			p.warnf(k, "ignoring unknown rate_limit field %q", k.Value)
		}
		if err != nil {
			return nil, p.errorf(v, "%s %q: want a positive whole number", k.Value, v.Value)
		}
	}
	if r.unlimited {
		if rpu != nil || unit != "" {
			p.warnf(m, "%s: unlimited is set; ignoring unit and requests_per_unit", what)
		}
		return r, nil
	}
	u, ok := units[unit]
	if !ok {
		return nil, p.errorf(m, "%s: unit %q: want second, minute, hour, day, week, month or year", what, unit)
	}
	if rpu == nil {
		return nil, p.errorf(m, "%s: no requests_per_unit", what)
	}
	r.current = &rlsv3.RateLimitResponse_RateLimit{Name: r.name, RequestsPerUnit: *rpu, Unit: u.enum}
	if mult > 1 {
		r.current.UnitMultiplier = wrapperspb.UInt32(mult)
	}
	if *rpu == 0 {
		r.blocked = true
		return r, nil
	}
	if !alg.Known() {
		return nil, p.errorf(algSet, "%s: unknown algorithm %q (want one of %v)", what, alg, limit.Algorithms)
	}
	if burstN != nil && alg != limit.TokenBucket && alg != limit.GCRA {
		p.warnf(burstN, "%s: %s ignores burst; it holds requests_per_unit", what, alg)
		burst = 0
	}
	period := u.period * time.Duration(mult)
	if mult > math.MaxInt32 || period/time.Duration(mult) != u.period {
		return nil, p.errorf(m, "%s: unit_multiplier %d is too large", what, mult)
	}
	r.limit = limit.Limit{Name: "descriptor", Count: int64(*rpu), Period: period, Burst: burst, Algorithm: alg, FailClosed: r.limit.FailClosed}
	if err := r.limit.Validate(); err != nil {
		return nil, p.errorf(m, "%s: %v", what, err)
	}
	return r, nil
}
