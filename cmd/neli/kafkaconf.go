package main

import (
	"bufio"
	"flag"
	"fmt"
	"os"
	"sort"
	"strings"

	"github.com/goneli/goneli"
)

// Settings for the Kafka clients come, lowest precedence first, from a properties file (-F or
// --config, or $NELI_CONFIG_FILE), from NELI_X_* environment variables, and from -X key=value
// flags, as kcat and the Kafka tools take them; --kafka, when given, overrides bootstrap.servers.
// A file or the environment keeps secrets out of ps, which shows every process's arguments to
// every user of the host.

// envPrefix marks environment variables that carry a librdkafka property: NELI_X_SASL_PASSWORD is
// sasl.password. Properties whose names contain an underscore cannot be given this way.
const envPrefix = "NELI_X_"

// propertyFlags is the repeatable -X flag.
type propertyFlags []string

func (p *propertyFlags) String() string { return strings.Join(*p, " ") }

// Set accepts anything: the flag package would print a refused value in its error, and a value
// without its "=" may be a secret. resolve checks the form.
func (p *propertyFlags) Set(v string) error {
	*p = append(*p, v)
	return nil
}

// kafkaSettings are the flags that set Kafka client properties, and what they resolve to.
type kafkaSettings struct {
	props    propertyFlags
	propFile string
	// resolved is every property from the file, the environment and -X, after resolve.
	resolved goneli.KafkaConfigMap
	// exposed names secret properties given with -X, for a warning once logging is set up.
	exposed []string
}

func (k *kafkaSettings) register(fs *flag.FlagSet) {
	fs.Var(&k.props, "X", "librdkafka property key=value for the Kafka clients, repeatable (for example -X security.protocol=SASL_SSL)")
	fs.StringVar(&k.propFile, "F", "", "file of librdkafka properties, one key=value per line, # for comments (default $NELI_CONFIG_FILE)")
	fs.StringVar(&k.propFile, "config", "", "same as -F")
}

// resolve reads the file and the environment and applies -X. bootstrap is --kafka's value and
// explicit whether it was given; it returns the bootstrap servers to use.
func (k *kafkaSettings) resolve(bootstrap string, explicit bool) (string, error) {
	props := goneli.KafkaConfigMap{}
	file := k.propFile
	if file == "" {
		file = os.Getenv("NELI_CONFIG_FILE")
	}
	if file != "" {
		if err := readProperties(file, props); err != nil {
			return "", err
		}
	}
	env := os.Environ()
	sort.Strings(env)
	for _, kv := range env {
		name, value, _ := strings.Cut(kv, "=")
		if key, ok := strings.CutPrefix(name, envPrefix); ok && key != "" {
			props[strings.ToLower(strings.ReplaceAll(key, "_", "."))] = value
		}
	}
	for _, kv := range k.props {
		key, value, ok := strings.Cut(kv, "=")
		key = strings.TrimSpace(key)
		if !ok || key == "" {
			return "", badUsage("-X: want key=value, for example -X security.protocol=SASL_SSL (the argument is not shown, in case it holds a secret)")
		}
		props[key] = value
		if secretKey(key) {
			k.exposed = append(k.exposed, key)
		}
	}
	if v, ok := props["bootstrap.servers"]; ok && !explicit {
		bootstrap = fmt.Sprint(v)
	}
	props["bootstrap.servers"] = bootstrap
	k.resolved = props
	return bootstrap, nil
}

// readProperties reads a Java-style properties file: key=value or key: value per line, blank
// lines and lines starting with # or ! ignored. Line continuations are not supported.
func readProperties(path string, into goneli.KafkaConfigMap) error {
	f, err := os.Open(path)
	if err != nil {
		return badUsage("-F %s: %v", path, err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for line := 1; sc.Scan(); line++ {
		text := strings.TrimSpace(sc.Text())
		if text == "" || text[0] == '#' || text[0] == '!' {
			continue
		}
		i := strings.IndexAny(text, "=:")
		if i <= 0 {
			// The line itself is left out: it may be a secret that lost its key.
			return badUsage("-F %s line %d: want key=value", path, line)
		}
		into[strings.TrimSpace(text[:i])] = strings.TrimSpace(text[i+1:])
	}
	if err := sc.Err(); err != nil {
		return badUsage("-F %s: %v", path, err)
	}
	return nil
}

// secretKey tells the properties whose values must not be shown, as goneli.Config.String does.
func secretKey(key string) bool {
	k := strings.ToLower(key)
	return strings.Contains(k, "password") || strings.Contains(k, "secret") || strings.Contains(k, "jaas") ||
		strings.Contains(k, "key") && !strings.HasSuffix(k, ".location")
}
