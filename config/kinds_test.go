package config_test

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/heraldhq/herald/config"
)

// kindsText is a valid kinds file: the kinds of base, on their own.
const kindsText = `kinds:
  - name: payment.approved
    category: transactional
    channels: [webhook, sms]
    templates:
      webhook: {title: "Paid", body: "Paid {{.amount}} won"}
      sms: {title: "Paid", body: "Paid {{.amount}} won"}
`

// withKindsFile is base with its kinds replaced by kinds_file.
func withKindsFile(t *testing.T, file string) string {
	t.Helper()
	i := strings.Index(base, "kinds:\n")
	if i < 0 {
		t.Fatal("base config has no kinds")
	}
	return base[:i] + "kinds_file: " + file + "\n"
}

// writeKinds writes the server config and the kinds file into a fresh
// directory, the kinds file under kindsName (which may hold a directory),
// and returns the config file's path and the kinds file's.
func writeKinds(t *testing.T, server, kindsName, kinds string) (configPath, kindsPath string) {
	t.Helper()
	dir := t.TempDir()
	configPath, kindsPath = filepath.Join(dir, "herald.yaml"), filepath.Join(dir, kindsName)
	if err := os.MkdirAll(filepath.Dir(kindsPath), 0o700); err != nil {
		t.Fatal(err)
	}
	for p, text := range map[string]string{configPath: server, kindsPath: kinds} {
		if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return configPath, kindsPath
}

// TestKindsFile: kinds_file, relative to the config file's directory (not
// the working directory), gives herald the same kinds as the inline list,
// and LoadKinds reads the very same list from the file.
func TestKindsFile(t *testing.T) {
	t.Parallel()
	inline, err := config.Load(writeFile(t, base), noEnv)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ name, ref, file string }{
		{"NextToTheConfig", "kinds.yaml", "kinds.yaml"},
		{"InASubdirectory", "shared/kinds.yaml", "shared/kinds.yaml"},
		{"Absolute", "", "kinds.yaml"}, // ref: the kinds file's absolute path
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			// The test runs in the package directory: a file resolved
			// against the working directory would not be found.
			dir := t.TempDir()
			kindsPath := filepath.Join(dir, tc.file)
			ref := tc.ref
			if ref == "" {
				ref = kindsPath
			}
			configPath := filepath.Join(dir, "herald.yaml")
			if err := os.MkdirAll(filepath.Dir(kindsPath), 0o700); err != nil {
				t.Fatal(err)
			}
			for p, text := range map[string]string{configPath: withKindsFile(t, ref), kindsPath: kindsText} {
				if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			server, err := config.Load(configPath, noEnv)
			if err != nil {
				t.Fatalf("Load = %v", err)
			}
			if !reflect.DeepEqual(server.Kinds, inline.Kinds) {
				t.Errorf("kinds from %s = %+v, want the inline ones %+v", ref, server.Kinds, inline.Kinds)
			}
			app, err := config.LoadKinds(kindsPath)
			if err != nil {
				t.Fatalf("LoadKinds = %v", err)
			}
			if !reflect.DeepEqual(app, server.Kinds) {
				t.Errorf("LoadKinds = %+v, the server has %+v", app, server.Kinds)
			}
			if err := server.Validate(); err != nil {
				t.Errorf("a loaded config no longer validates: %v", err)
			}
		})
	}
}

// TestKindsFileErrorsNameFileAndKey: every problem in a kinds file is
// reported with the file's path and the key, by LoadKinds (the library's
// path) and by Load (herald serve's), in block and flow style alike.
func TestKindsFileErrorsNameFileAndKey(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, kinds string
		want        []string // every one must follow "config: <kinds file>: "
	}{
		{"BadCategoryBlock", strings.Replace(kindsText, "category: transactional", "category: urgent", 1),
			[]string{`kinds[0].category: "urgent" is not one of alert, transactional, marketing, internal`}},
		{"BadCategoryFlow", "kinds:\n  - {name: a, category: urgent, channels: [sms], templates: {sms: {body: hi}}}\n",
			[]string{`kinds[0].category: "urgent" is not one of`}},
		{"UnknownKey", strings.Replace(kindsText, "    category:", "    lane: alert\n    category:", 1),
			[]string{`line 3: unknown key "kinds[0].lane"`}},
		{"UnknownTopLevelKey", kindsText + "api_keys: []\n", []string{`line 8: unknown key "api_keys"`}},
		{"ChannelsNotAListFlow", "kinds:\n  - {name: a, category: alert, channels: sms}\n",
			[]string{"line 2: kinds[0].channels: want a list, not the text `sms`"}},
		{"MissingTemplate", strings.Replace(kindsText, "      sms: {title: \"Paid\", body: \"Paid {{.amount}} won\"}\n", "", 1),
			[]string{"kinds[0].templates.sms: missing (every channel needs a template)"}},
		{"TemplateThatDoesNotParse", strings.Replace(kindsText, `body: "Paid {{.amount}} won"}`, `body: "Paid {{.amount"}`, 1),
			[]string{"kinds[0].templates.webhook.body: not a Go template: line 1: unclosed action"}},
		{"DuplicateName", kindsText + strings.TrimPrefix(kindsText, "kinds:\n"),
			[]string{`kinds[1].name: duplicate kind "payment.approved"`}},
		{"NotAMapping", "- name: a\n", []string{"line 1: the file must be a mapping of keys to values (kinds: …)"}},
		{"Empty", "", []string{"kinds: at least one kind is required"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			configPath, kindsPath := writeKinds(t, withKindsFile(t, "kinds.yaml"), "kinds.yaml", tc.kinds)
			_, libErr := config.LoadKinds(kindsPath)
			_, serverErr := config.Load(configPath, noEnv)
			for who, err := range map[string]error{"LoadKinds": libErr, "Load": serverErr} {
				if err == nil {
					t.Errorf("%s accepted %q", who, tc.kinds)
					continue
				}
				for _, w := range tc.want {
					if !strings.Contains(err.Error(), "config: "+kindsPath+": ") || !strings.Contains(err.Error(), w) {
						t.Errorf("%s = %q, want it to name %s and say %q", who, err, kindsPath, w)
					}
				}
			}
		})
	}

	t.Run("ChannelNoProviderServesNamesTheKindsFile", func(t *testing.T) {
		t.Parallel()
		kinds := strings.Replace(strings.Replace(kindsText, "[webhook, sms]", "[webhook, email]", 1), "      sms:", "      email:", 1)
		configPath, kindsPath := writeKinds(t, withKindsFile(t, "kinds.yaml"), "kinds.yaml", kinds)
		if _, err := config.LoadKinds(kindsPath); err != nil {
			t.Fatalf("LoadKinds knows no providers and must accept it: %v", err)
		}
		_, err := config.Load(configPath, noEnv)
		want := "config: " + kindsPath + `: kinds[0].channels[1]: no provider serves channel "email"`
		if err == nil || err.Error() != want {
			t.Fatalf("Load = %v, want %q", err, want)
		}
	})

	t.Run("MissingFile", func(t *testing.T) {
		t.Parallel()
		configPath := writeFile(t, withKindsFile(t, "nowhere.yaml"))
		_, err := config.Load(configPath, noEnv)
		if err == nil || !strings.Contains(err.Error(), filepath.Join(filepath.Dir(configPath), "nowhere.yaml")) {
			t.Fatalf("Load = %v, want an error naming the missing file", err)
		}
	})
}

// TestKindsFileNotTogetherWithKinds: one place for the kinds, or herald
// and the applications reading only the file could know different ones.
func TestKindsFileNotTogetherWithKinds(t *testing.T) {
	t.Parallel()
	configPath, _ := writeKinds(t, base+"kinds_file: kinds.yaml\n", "kinds.yaml", kindsText)
	_, err := config.Load(configPath, noEnv)
	if err == nil || !strings.Contains(err.Error(), "config: kinds_file: not together with kinds") {
		t.Fatalf("Load = %v, want kinds_file refused next to kinds", err)
	}
	// An empty list beside the file too.
	configPath, _ = writeKinds(t, "kinds: []\nkinds_file: kinds.yaml\n", "kinds.yaml", kindsText)
	if _, err := config.Load(configPath, noEnv); err == nil || !strings.Contains(err.Error(), "config: kinds_file: not together with kinds") {
		t.Fatalf("Load of kinds: [] beside kinds_file = %v, want it refused", err)
	}
}

// TestKindsFileUnreadIsRefused: a Config built in code with KindsFile set
// but never loaded must not run with no kinds.
func TestKindsFileUnreadIsRefused(t *testing.T) {
	t.Parallel()
	c, err := config.Parse([]byte(withKindsFile(t, "kinds.yaml")))
	if err != nil {
		t.Fatal(err)
	}
	err = c.WithDefaults().Validate()
	if err == nil || !strings.Contains(err.Error(), `config: kinds_file: "kinds.yaml" was not read`) {
		t.Fatalf("Validate = %v, want the unread kinds file refused", err)
	}
}

// TestInlineTemplateThatDoesNotParseNamesTheKey: the template check holds
// for the config file's own kinds too.
func TestInlineTemplateThatDoesNotParseNamesTheKey(t *testing.T) {
	t.Parallel()
	_, err := config.Load(writeFile(t, edit(t, `sms: {title: "Paid", body: "Paid {{.amount}} won"}`, `sms: {title: "Paid {{", body: "x"}`)), noEnv)
	want := "config: kinds[0].templates.sms.title: not a Go template: line 1: unclosed action"
	if err == nil || err.Error() != want {
		t.Fatalf("Load = %v, want %q", err, want)
	}
}

// A kind's tenants are names, each once.
func TestKindTenantsAreNamesEachOnce(t *testing.T) {
	t.Parallel()
	kind := func(tenants ...string) []config.Kind {
		return []config.Kind{{Name: "a.receipt", Category: "transactional", Channels: []string{"webhook"}, Tenants: tenants,
			Templates: map[string]config.Template{"webhook": {Title: "t", Body: "b"}}}}
	}
	for _, c := range []struct {
		tenants []string
		want    string
	}{
		{[]string{"acme"}, ""},
		{nil, ""},
		{[]string{"acme", " globex"}, "kinds[0].tenants[1]: a tenant name, without spaces around it"},
		{[]string{""}, "kinds[0].tenants[0]: a tenant name"},
		{[]string{"acme", "acme"}, `kinds[0].tenants[1]: "acme" is listed twice`},
	} {
		err := config.ValidateKinds(kind(c.tenants...), nil)
		if (c.want == "") != (err == nil) || err != nil && !strings.Contains(err.Error(), c.want) {
			t.Errorf("tenants %q: %v; want %q", c.tenants, err, c.want)
		}
	}
}

// A template may call catalog's own functions (json): the start-up check
// parses it as the catalog will, and refuses a function neither knows.
func TestTemplateMayCallCatalogFunctions(t *testing.T) {
	t.Parallel()
	ok := `webhook: {title: "Paid", body: '{"amount":{{json .amount}}}'}`
	if _, err := config.Load(writeFile(t, edit(t, `webhook: {title: "Paid", body: "Paid {{.amount}} won"}`, ok)), noEnv); err != nil {
		t.Fatalf("Load with json = %v, want it loaded", err)
	}
	bad := `webhook: {title: "Paid", body: '{{nosuch .amount}}'}`
	_, err := config.Load(writeFile(t, edit(t, `webhook: {title: "Paid", body: "Paid {{.amount}} won"}`, bad)), noEnv)
	if err == nil || !strings.Contains(err.Error(), `kinds[0].templates.webhook.body: not a Go template`) {
		t.Fatalf("Load with nosuch = %v, want the template refused", err)
	}
}
