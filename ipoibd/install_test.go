package main

import (
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestMakeInstall: make install writes only under DESTDIR, where PREFIX
// says: a private prefix keeps the unit and the configuration under it
// too, the system prefixes keep them where systemd and the operator look
// (/etc; a /usr package's unit in /usr/lib/systemd/system), the CNI plugin goes where runtimes look (/opt/cni/bin) and the
// recipes under the doc directory. The unit names the installed paths (without DESTDIR), and make
// uninstall with the same variables removes every file.
func TestMakeInstall(t *testing.T) {
	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("make not installed")
	}
	built := false
	for _, tc := range []struct {
		prefix   string
		files    []string // relative to DESTDIR
		exec, rc string   // the unit's ExecStart binary, EnvironmentFile
	}{
		{"/opt/ipoibd", slices.Concat([]string{"opt/ipoibd/etc/ipoibd/ib0.env.example", "opt/ipoibd/lib/systemd/system/ipoibd@.service",
			"opt/ipoibd/libexec/cni/ipoibd-cni", "opt/ipoibd/sbin/ipoibd"}, installedRecipes("opt/ipoibd"), []string{"opt/ipoibd/share/man/man8/ipoibd.8"}),
			"/opt/ipoibd/sbin/ipoibd", "/opt/ipoibd/etc/ipoibd/%i.env"},
		{"/usr/local", slices.Concat([]string{"etc/ipoibd/ib0.env.example", "etc/systemd/system/ipoibd@.service",
			"opt/cni/bin/ipoibd-cni", "usr/local/sbin/ipoibd"}, installedRecipes("usr/local"), []string{"usr/local/share/man/man8/ipoibd.8"}),
			"/usr/local/sbin/ipoibd", "/etc/ipoibd/%i.env"},
		// A distribution's package: the unit in systemd's vendor directory.
		{"/usr", slices.Concat([]string{"etc/ipoibd/ib0.env.example", "opt/cni/bin/ipoibd-cni", "usr/lib/systemd/system/ipoibd@.service",
			"usr/sbin/ipoibd"}, installedRecipes("usr"), []string{"usr/share/man/man8/ipoibd.8"}),
			"/usr/sbin/ipoibd", "/etc/ipoibd/%i.env"},
	} {
		t.Run(tc.prefix, func(t *testing.T) {
			tmp := t.TempDir()
			dest := filepath.Join(tmp, "root")
			vars := []string{"DESTDIR=" + dest, "PREFIX=" + tc.prefix, "UNIT=" + filepath.Join(tmp, "ipoibd@.service")}
			if built {
				vars = append(vars, "-o", "build") // bin/ipoibd is there: the build takes seconds
			}
			built = true
			if out, err := exec.Command("make", append([]string{"-s", "-C", "..", "install"}, vars...)...).CombinedOutput(); err != nil {
				t.Fatalf("make install: %v\n%s", err, out)
			}
			if got := filesUnder(t, dest); !slices.Equal(got, tc.files) {
				t.Errorf("make install PREFIX=%s wrote\n  %s\nwant\n  %s", tc.prefix, strings.Join(got, "\n  "), strings.Join(tc.files, "\n  "))
			}
			var unit string
			for _, f := range tc.files {
				if strings.HasSuffix(f, ".service") {
					b, err := os.ReadFile(filepath.Join(dest, f))
					if err != nil {
						t.Fatal(err)
					}
					unit = string(b)
				}
			}
			for _, want := range []string{"\nExecStart=" + tc.exec + " run ", "\nEnvironmentFile=" + tc.rc + "\n"} {
				if !strings.Contains(unit, want) {
					t.Errorf("the installed unit lacks %q", strings.TrimSpace(want))
				}
			}
			if out, err := exec.Command("make", append([]string{"-s", "-C", "..", "uninstall"}, vars...)...).CombinedOutput(); err != nil {
				t.Fatalf("make uninstall: %v\n%s", err, out)
			}
			if left := filesUnder(t, dest); len(left) > 0 {
				t.Errorf("make uninstall left %v", left)
			}
		})
	}
}

// installedRecipes are the recipes make install puts under prefix's doc directory,
// in filesUnder's order.
func installedRecipes(prefix string) []string {
	var out []string
	for _, f := range []string{"NetworkManager/ipoibd-unmanaged.conf", "ipoibd-netns.conf", "netplan/60-ipoibd-ib0.yaml",
		"networkd/ib0-unmanaged.network", "networkd/ib0.network"} {
		out = append(out, prefix+"/share/doc/ipoibd/examples/"+f)
	}
	return out
}

// filesUnder lists the files (not directories) under dir, relative to it.
func filesUnder(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		out = append(out, rel)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(out)
	return out
}
