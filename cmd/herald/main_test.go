package main

import (
	"bytes"
	"regexp"
	"runtime/debug"
	"slices"
	"testing"
)

// The CLI's behaviour as a user sees it is tested on the real binary in
// e2e/cli_test.go; these are the pieces a binary cannot show.

func TestVersionFrom(t *testing.T) {
	t.Parallel()
	stamped := func(version string, settings ...string) *debug.BuildInfo {
		bi := &debug.BuildInfo{Main: debug.Module{Path: "github.com/heraldhq/herald", Version: version}}
		for i := 0; i+1 < len(settings); i += 2 {
			bi.Settings = append(bi.Settings, debug.BuildSetting{Key: settings[i], Value: settings[i+1]})
		}
		return bi
	}
	const rev = "2169cb619ce203f6b4195b80f6f1fbbbe15f6e6f"
	for _, c := range []struct {
		name    string
		ldflags string
		bi      *debug.BuildInfo
		want    string
	}{
		{"LdflagsWin", "v1.2.3", stamped("v1.0.0"), "v1.2.3"},
		{"GoInstallAtVersion", "", stamped("v1.2.0"), "v1.2.0"},
		{"BuiltInAClone", "", stamped("v0.0.0-20261201144919-2169cb619ce2+dirty", "vcs.revision", rev), "v0.0.0-20261201144919-2169cb619ce2+dirty"},
		{"RevisionWithoutModuleVersion", "", stamped("(devel)", "vcs.revision", rev, "vcs.modified", "false"), "dev-2169cb619ce2"},
		{"ModifiedRevision", "", stamped("(devel)", "vcs.revision", rev, "vcs.modified", "true"), "dev-2169cb619ce2+dirty"},
		{"NoStampIsDev", "", stamped("(devel)"), "dev"},
		{"NoBuildInfoIsDev", "", nil, "dev"},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := versionFrom(c.ldflags, c.bi); got != c.want {
				t.Fatalf("versionFrom = %q, want %q", got, c.want)
			}
		})
	}
}

func TestParseTakesFlagsAnywhereAndStopsAtDoubleDash(t *testing.T) {
	t.Parallel()
	cmd := root.lookup("parked").lookup("requeue")
	for _, c := range []struct {
		name       string
		args       []string
		wantPos    []string
		wantAll    bool
		wantTenant string
	}{
		{"FlagsFirst", []string{"--all", "--tenant", "t1"}, nil, true, "t1"},
		{"FlagsAfterTheArgument", []string{"ntf_1.sms", "--tenant", "t1"}, []string{"ntf_1.sms"}, false, "t1"},
		{"FlagsBetweenArguments", []string{"a", "--all", "b"}, []string{"a", "b"}, true, ""},
		{"DoubleDashEndsFlags", []string{"--tenant", "t1", "--", "--all", "b"}, []string{"--all", "b"}, false, "t1"},
		{"DoubleDashAfterAnArgument", []string{"a", "--", "--all"}, []string{"a", "--all"}, false, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			fs, f := newParkedFlags(cmd)
			all := fs.Bool("all", false, "")
			pos, err := parse(cmd, fs, c.args)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(pos, c.wantPos) || *all != c.wantAll || *f.tenant != c.wantTenant {
				t.Fatalf("parse(%q): arguments %q, --all %v, --tenant %q; want %q, %v, %q",
					c.args, pos, *all, *f.tenant, c.wantPos, c.wantAll, c.wantTenant)
			}
		})
	}
}

func TestDatabaseLabelHidesThePasswordAndResolvesRelativePaths(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ database, want string }{
		{"postgres://herald:s3cret@db.internal:5432/herald?sslmode=verify-full&pool_max_conns=16",
			"postgres://herald:xxxxx@db.internal:5432/herald?sslmode=verify-full&pool_max_conns=16"},
		{"postgres://herald@db.internal/herald", "postgres://herald@db.internal/herald"},
		{"sqlite:/var/lib/herald/herald.db", "sqlite:/var/lib/herald/herald.db"},
	} {
		if got := databaseLabel(c.database); got != c.want {
			t.Errorf("databaseLabel(%q) = %q, want %q", c.database, got, c.want)
		}
	}
	if got := databaseLabel("sqlite:./herald.db"); !regexp.MustCompile(`^sqlite:\./herald\.db \(/.+/herald\.db\)$`).MatchString(got) {
		t.Errorf("databaseLabel(sqlite:./herald.db) = %q, want the path as written and the absolute one", got)
	}
}

// cli runs herald with args as the command line does and returns its exit
// status and output.
func cli(args ...string) (code int, stdout, stderr string) {
	var out, errb bytes.Buffer
	code = run(args, &out, &errb)
	return code, out.String(), errb.String()
}
