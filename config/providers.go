package config

import (
	"fmt"
	"net"
	"net/url"
	"path/filepath"
	"strings"

	"go.yaml.in/yaml/v3"
)

// ProviderOptions are the settings of the real provider types, written in
// the provider's entry beside name, type and channel. Each type reads its
// own and refuses none of the others'; checkProvider says which it needs.
//
// Credentials are never written in the file itself: each is a Secret, read
// from a file or an environment variable the entry names, once, at start.
// (The webhook's `secret: whsec_…`, fixed by DESIGN §8, is the one value
// the file may hold; `secrets:` takes files and variables too.)
type ProviderOptions struct {
	// Endpoint overrides the provider's base URL (a sandbox, a regional
	// host, a test double). Defaults to the provider's production URL.
	Endpoint string `yaml:"endpoint"`

	// fcm: the service account's JSON key.
	Credentials Secret `yaml:"credentials"`

	// apns: the .p8 signing key, its id, the team and the app's bundle id;
	// optionally apns-priority (10, 5 or 1), how long APNs keeps an
	// undelivered push (ttl), one apns-collapse-id for every push or the
	// kind as the collapse id, and the connections opened at most.
	Key            Secret   `yaml:"key"`
	KeyID          string   `yaml:"key_id"`
	TeamID         string   `yaml:"team_id"`
	Topic          string   `yaml:"topic"`
	Priority       int      `yaml:"priority"`
	TTL            Duration `yaml:"ttl"`
	CollapseID     string   `yaml:"collapse_id"`
	CollapseByKind bool     `yaml:"collapse_by_kind"`
	MaxConns       int      `yaml:"max_conns"`

	// smtp: the server (host:port), the account, the envelope sender and
	// the domain of Message-IDs; plaintext lets a server without STARTTLS
	// be used (a relay on the same host only).
	Addr      string `yaml:"addr"`
	Username  string `yaml:"username"`
	Password  Secret `yaml:"password"`
	From      string `yaml:"from"`
	Domain    string `yaml:"domain"`
	Plaintext bool   `yaml:"plaintext"`
	// smtp and webhook: CAFile is a PEM file of the certificates a
	// private server's is verified against (relative to the config file),
	// instead of the system's roots: a private CA's, or a self-signed
	// certificate itself. Defaults to none: the system's roots.
	CAFile string `yaml:"ca_file"`

	// bizppurio: the account (Password above), the sender number (From
	// above), the AlimTalk sender key and a template code per kind, and
	// the token the operator puts in the report URL registered with the
	// vendor.
	Account       string            `yaml:"account"`
	SenderKey     string            `yaml:"sender_key"`
	Templates     map[string]string `yaml:"templates"`
	CallbackToken Secret            `yaml:"callback_token"`

	// twilio: the account, its auth token, the sender (From above, or a
	// messaging service) and herald's public callback URL for this
	// provider (https://…/v1/callbacks/{name}).
	AccountSID          string `yaml:"account_sid"`
	AuthToken           Secret `yaml:"auth_token"`
	MessagingServiceSID string `yaml:"messaging_service_sid"`
	CallbackURL         string `yaml:"callback_url"`

	// webhook: Standard Webhooks signing keys ("whsec_…"), each request
	// signed with every one (the new and the old during a rotation).
	Secret  string   `yaml:"secret"`
	Secrets []Secret `yaml:"secrets"`

	// read holds what the Secrets resolved to, by YAML key.
	read map[string][]byte
}

// Secret names where a credential is: a file (relative to the config
// file) or an environment variable.
type Secret struct {
	File string `yaml:"file"`
	Env  string `yaml:"env"`
}

func (s Secret) given() bool { return s.File != "" || s.Env != "" }

// UnmarshalYAML takes {file: …} or {env: …} only. A credential written in
// the file itself is refused without quoting it: the decoder's own error
// would show its first characters.
func (s *Secret) UnmarshalYAML(n *yaml.Node) error {
	refuse := func(msg string) error {
		return &yaml.TypeError{Errors: []string{fmt.Sprintf("line %d: column %d: %s", n.Line, n.Column, msg)}}
	}
	if n.Kind != yaml.MappingNode {
		return refuse("a credential may not be written in the config file: give {file: PATH} or {env: NAME}")
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if v.Kind != yaml.ScalarNode {
			return refuse(fmt.Sprintf("%s: a file path or a variable name", k.Value))
		}
		switch k.Value {
		case "file":
			s.File = v.Value
		case "env":
			s.Env = v.Value
		default:
			return refuse(fmt.Sprintf("field %s not found in type config.Secret (file or env)", k.Value))
		}
	}
	return nil
}

// Read returns the credential a provider's entry read at start for key
// ("password", "secrets[1]"…); nil when the entry names none.
func (p *Provider) Read(key string) []byte { return p.read[key] }

// readSecret reads s for key of the entry (key names it in errors, which
// never hold the value).
func (p *Provider) readSecret(entry, key string, s Secret, dir string, getenv func(string) string) error {
	if !s.given() {
		return nil
	}
	var v []byte
	switch {
	case s.File != "" && s.Env != "":
		return fmt.Errorf("config: %s.%s: give file or env, not both", entry, key)
	case s.File != "":
		b, err := readBeside(dir, s.File)
		if err != nil {
			return fmt.Errorf("config: %s.%s.file: %w", entry, key, err)
		}
		v = []byte(strings.TrimRight(string(b), "\r\n"))
	default:
		v = []byte(getenv(s.Env))
		if len(v) == 0 {
			return fmt.Errorf("config: %s.%s.env: %s is not set", entry, key, s.Env)
		}
	}
	if len(v) == 0 {
		return fmt.Errorf("config: %s.%s: empty", entry, key)
	}
	if p.read == nil {
		p.read = map[string][]byte{}
	}
	p.read[key] = v
	return nil
}

// readProviderSecrets reads every credential the providers name.
func (c *Config) readProviderSecrets(dir string, getenv func(string) string) error {
	for i := range c.Providers {
		p := &c.Providers[i]
		entry := fmt.Sprintf("providers[%d]", i)
		if p.CAFile != "" && !filepath.IsAbs(p.CAFile) {
			p.CAFile = filepath.Join(dir, p.CAFile)
		}
		for key, s := range map[string]Secret{
			"credentials": p.Credentials, "key": p.Key, "password": p.Password,
			"callback_token": p.CallbackToken, "auth_token": p.AuthToken,
		} {
			if err := p.readSecret(entry, key, s, dir, getenv); err != nil {
				return err
			}
		}
		for j, s := range p.Secrets {
			if !s.given() {
				return fmt.Errorf("config: %s.secrets[%d]: give file or env", entry, j)
			}
			if err := p.readSecret(entry, fmt.Sprintf("secrets[%d]", j), s, dir, getenv); err != nil {
				return err
			}
		}
	}
	return nil
}

// ProviderTypes are the provider types a config may name.
var ProviderTypes = []string{"webhook", "sim", "fcm", "apns", "smtp", "bizppurio", "twilio"}

// checkProvider checks what a real provider type needs; key names the entry.
func checkProvider(key string, p *Provider) error {
	need := func(what string, ok bool) error {
		if !ok {
			return fmt.Errorf("config: %s.%s: required for type %s", key, what, p.Type)
		}
		return nil
	}
	var errs []error
	switch p.Type {
	case "fcm":
		errs = append(errs, need("credentials", p.Credentials.given()))
	case "apns":
		errs = append(errs, need("key", p.Key.given()), need("key_id", p.KeyID != ""), need("team_id", p.TeamID != ""),
			need("topic", p.Topic != ""))
	case "smtp":
		errs = append(errs, need("addr", p.Addr != ""), need("from", p.From != ""))
		if p.Username != "" {
			errs = append(errs, need("password", p.Password.given()))
		}
	case "bizppurio":
		errs = append(errs, need("account", p.Account != ""), need("password", p.Password.given()), need("from", p.From != ""))
	case "twilio":
		errs = append(errs, need("account_sid", p.AccountSID != ""), need("auth_token", p.AuthToken.given()),
			need("from or messaging_service_sid", p.From != "" || p.MessagingServiceSID != ""))
	}
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// ProductionWarnings are what a production config allows but a reader of
// its start-up log should hear about: a webhook provider that signs
// nothing (its receiver cannot tell herald's requests from anyone's), or
// that posts over plain http to a host that is not this machine; an smtp
// provider allowed to go on without STARTTLS (plaintext) to a host that is
// not this machine, where the mail and its password cross the network in
// clear. Nil outside production.
func (c *Config) ProductionWarnings() []string {
	if c.Environment != EnvProduction {
		return nil
	}
	var out []string
	for i, p := range c.Providers {
		if p.Type == "smtp" && p.Plaintext && !Loopback(p.Addr) {
			out = append(out, fmt.Sprintf("providers[%d] (%s): an smtp provider with plaintext: true talks to a host that is not this machine: "+
				"a server without STARTTLS (or anyone on the way who strips it) gets the mail and the password in clear", i, p.Name))
		}
		if p.Type != "webhook" {
			continue
		}
		if p.Secret == "" && len(p.Secrets) == 0 {
			out = append(out, fmt.Sprintf("providers[%d] (%s): a webhook provider with no secret sends unsigned requests, which its receiver cannot tell from anyone's", i, p.Name))
		}
		if u, err := url.Parse(p.URL); err == nil && u.Scheme == "http" && !Loopback(net.JoinHostPort(u.Hostname(), "0")) {
			out = append(out, fmt.Sprintf("providers[%d] (%s): a webhook provider posts over plain http, readable on the way", i, p.Name))
		}
	}
	return out
}
