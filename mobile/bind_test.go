package mobile

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/llmswarm/llmswarm/answer"
	"github.com/llmswarm/llmswarm/client"
	"github.com/llmswarm/llmswarm/nodetest"
)

// TestJavaBinding builds what gomobile bind would put in an Android .aar,
// for the host instead of a phone, and drives it from a JVM as an app
// would: gobind generates the Java (and Objective-C) API and the Go glue,
// the glue is built as libgojni.so (-buildmode=c-shared, against the
// JDK's JNI headers), and testdata/java/BindTest.java starts a peer
// through it, sees this test's role peer, asks it with streamed tokens,
// cancels, reports a low battery, and stops.
//
// Two Android pieces are stood in for, for the host only (testdata/):
// the NDK's <android/log.h> and liblog, which gobind's C glue logs
// through, and android.content.Context, which go.Seq names in the
// setContext an app calls and this test never does. Everything else is
// what an app runs: go.Seq loads libgojni.so by System.loadLibrary.
//
// It needs a JDK (javac, java, include/jni.h), gcc and ar: without them it
// is skipped, and fails under CI=true (scripts/install-deps.sh installs
// them).
func TestJavaBinding(t *testing.T) {
	tools := findBindTools(t)
	repo, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	work := t.TempDir()
	gen := filepath.Join(work, "gen")

	step := time.Now()
	run(t, repo, nil, "go", "tool", "gobind", "-lang=go,java,objc", "-outdir="+gen, "./mobile")
	t.Logf("gobind: %s", time.Since(step).Round(time.Millisecond))
	checkObjCHeader(t, filepath.Join(gen, "src", "gobind", "Mobile.objc.h"))

	step = time.Now()
	lib := buildJNILibrary(t, tools, repo, gen, work)
	t.Logf("libgojni.so (c-shared): %s", time.Since(step).Round(time.Millisecond))

	step = time.Now()
	classes := filepath.Join(work, "classes")
	javaSrc := []string{filepath.Join("testdata", "java", "BindTest.java"),
		filepath.Join("testdata", "java", "android", "content", "Context.java")}
	for _, dir := range []string{"go", "mobile"} {
		fs, _ := filepath.Glob(filepath.Join(gen, "java", dir, "*.java"))
		javaSrc = append(javaSrc, fs...)
	}
	run(t, "", nil, tools.javac, append([]string{"-Xlint:-options", "-d", classes}, javaSrc...)...)
	t.Logf("javac: %s", time.Since(step).Round(time.Millisecond))

	step = time.Now()
	role := rolePeer(t)
	out := filepath.Join(work, "out")
	if err := os.Mkdir(out, 0o755); err != nil {
		t.Fatal(err)
	}
	runJava(t, tools.java, lib, classes, out, role)
	t.Logf("java run: %s", time.Since(step).Round(time.Millisecond))
	checkJavaOutput(t, out)
}

type bindTools struct {
	javac, java, javaHome, gcc, ar string
}

// findBindTools finds the JDK and the C tools, or skips (fails under CI).
func findBindTools(t *testing.T) bindTools {
	t.Helper()
	missing := func(what string) {
		t.Helper()
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s: run scripts/install-deps.sh (Debian package openjdk-17-jdk-headless)", what)
		}
		t.Skipf("%s: skipping the JVM binding test (scripts/install-deps.sh installs it)", what)
	}
	var tools bindTools
	for _, tool := range []struct {
		name string
		path *string
	}{{"javac", &tools.javac}, {"java", &tools.java}, {"gcc", &tools.gcc}, {"ar", &tools.ar}} {
		p, err := exec.LookPath(tool.name)
		if err != nil {
			missing(tool.name + " is not installed")
		}
		*tool.path = p
	}
	real, err := filepath.EvalSymlinks(tools.javac) // /usr/bin/javac -> JAVA_HOME/bin/javac
	if err != nil {
		t.Fatal(err)
	}
	tools.javaHome = filepath.Dir(filepath.Dir(real))
	if _, err := os.Stat(filepath.Join(tools.javaHome, "include", "jni.h")); err != nil {
		missing("no JNI headers in " + tools.javaHome + "/include")
	}
	return tools
}

// buildJNILibrary builds gobind's Go glue as lib/libgojni.so and returns
// lib. The glue is the package main gomobile bind would build for
// Android; here it is built for the host, in a module of its own that
// requires this one (replaced by the checkout), so it uses this
// checkout's go.sum and versions.
func buildJNILibrary(t *testing.T, tools bindTools, repo, gen, work string) string {
	t.Helper()
	mod := filepath.Join(work, "mod")
	pkg := filepath.Join(mod, "gobind")
	lib := filepath.Join(work, "lib")
	for _, d := range []string{pkg, lib} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	src, err := os.ReadDir(filepath.Join(gen, "src", "gobind"))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range src {
		name := e.Name()
		if strings.Contains(name, "_darwin") || strings.HasSuffix(name, ".m") || strings.HasSuffix(name, ".objc.h") {
			continue
		}
		// The Go tool builds foo_android.{go,c} only for GOOS=android:
		// the same files, renamed, build for linux. Headers keep their
		// names (the C files include them by name).
		if ext := filepath.Ext(name); ext == ".go" || ext == ".c" {
			name = strings.Replace(name, "_android.", "_jni.", 1)
		}
		copyFile(t, filepath.Join(gen, "src", "gobind", e.Name()), filepath.Join(pkg, name))
	}
	// What gomobile's Android build sets, for the host: GOOS=android's
	// define, the JDK's JNI headers, the stand-in <android/log.h> and
	// liblog. The JDK's jni.h types AttachCurrentThread's second argument
	// as void** where the NDK's has JNIEnv** (the same pointer).
	shim, err := filepath.Abs(filepath.Join("testdata", "jni"))
	if err != nil {
		t.Fatal(err)
	}
	inc := filepath.Join(tools.javaHome, "include")
	host := fmt.Sprintf("package main\n\n// #cgo CFLAGS: -D__GOBIND_ANDROID__ -Wno-incompatible-pointer-types -I%s -I%s -I%s\n// #cgo LDFLAGS: -L%s\nimport \"C\"\n",
		shim, inc, filepath.Join(inc, "linux"), lib)
	writeFile(t, filepath.Join(pkg, "jnihost.go"), host)
	run(t, "", nil, tools.gcc, "-c", "-O2", "-fPIC", "-I"+shim, "-o", filepath.Join(lib, "liblog.o"), filepath.Join(shim, "liblog.c"))
	run(t, "", nil, tools.ar, "rcs", filepath.Join(lib, "liblog.a"), filepath.Join(lib, "liblog.o"))

	goVersion := strings.TrimSpace(string(runOut(t, repo, nil, "go", "list", "-m", "-f", "{{.GoVersion}}")))
	mobileVersion := strings.TrimSpace(string(runOut(t, repo, nil, "go", "list", "-m", "-f", "{{.Version}}", "golang.org/x/mobile")))
	writeFile(t, filepath.Join(mod, "go.mod"), fmt.Sprintf(`module gobindhost

go %s

require (
	github.com/llmswarm/llmswarm v0.0.0
	golang.org/x/mobile %s
)

replace github.com/llmswarm/llmswarm => %s
`, goVersion, mobileVersion, repo))
	copyFile(t, filepath.Join(repo, "go.sum"), filepath.Join(mod, "go.sum"))
	env := []string{"GOFLAGS=" + strings.TrimSpace(os.Getenv("GOFLAGS")+" -mod=mod")}
	run(t, mod, env, "go", "build", "-buildmode=c-shared", "-ldflags=-s -w", "-o", filepath.Join(lib, "libgojni.so"), "./gobind")
	return lib
}

// runJava runs BindTest against role, and checks, when it says it
// reported 10% battery, that role sees that in the phone's record.
func runJava(t *testing.T, java, lib, classes, out string, role *nodetest.Peer) {
	t.Helper()
	if err := nodetest.ShareKey(filepath.Join(out, "data")); err != nil { // the phone joins role's swarm
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, java, "-Djava.library.path="+lib, "-cp", classes, "BindTest",
		role.Addr(t), role.ID().String(), filepath.Join(out, "data"), out)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr lockedBuffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var said []string
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		line := sc.Text()
		said = append(said, line)
		t.Logf("java: %s", line)
		if id, ok := strings.CutPrefix(line, "REPORTED "); ok {
			seesBattery(t, role, id, 10)
			io.WriteString(stdin, "stop\n")
		}
	}
	err = cmd.Wait()
	if err != nil || len(said) == 0 || said[len(said)-1] != "OK" {
		t.Fatalf("java: %v\nstdout:\n%s\nstderr:\n%s", err, strings.Join(said, "\n"), stderr.String())
	}
}

// seesBattery waits until role's view of peer id shows its battery at pct
// percent, not charging: the phone's report reached its capability record.
func seesBattery(t *testing.T, role *nodetest.Peer, id string, pct int) {
	t.Helper()
	nodetest.Eventually(t, 30*time.Second, fmt.Sprintf("the role peer sees the phone at %d%%", pct), func() bool {
		ps, err := role.Peers()
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range ps.Peers {
			if p.PeerID == id && p.Battery != nil && p.Battery.Percent == pct && !p.Battery.Charging {
				return true
			}
		}
		return false
	})
}

// checkJavaOutput checks what BindTest wrote: the streamed tokens are the
// final answer, the status refuses work for the battery, and the node's
// log reached the Java logger.
func checkJavaOutput(t *testing.T, out string) {
	t.Helper()
	var res answer.Result
	if err := json.Unmarshal(readFile(t, filepath.Join(out, "result.json")), &res); err != nil {
		t.Fatal(err)
	}
	tokens := string(readFile(t, filepath.Join(out, "tokens.txt")))
	if tokens == "" || tokens != res.FinalAnswer {
		t.Fatalf("tokens streamed to Java %q; final answer %q", tokens, res.FinalAnswer)
	}
	var st client.Status
	if err := json.Unmarshal(readFile(t, filepath.Join(out, "status.json")), &st); err != nil {
		t.Fatal(err)
	}
	if st.Power.TakingWork || !st.Power.Reported || st.Power.Battery == nil || st.Power.Battery.Percent != 10 {
		t.Fatalf("status after 10%%: %+v", st.Power)
	}
	if log := string(readFile(t, filepath.Join(out, "log.txt"))); !strings.Contains(log, "WARN not taking new work why=") {
		t.Fatalf("the Java logger did not get the refusal:\n%s", log)
	}
}

// checkObjCHeader checks that the Objective-C API names the facade's
// methods (no Xcode here to compile it).
func checkObjCHeader(t *testing.T, path string) {
	t.Helper()
	h := string(readFile(t, path))
	for _, want := range []string{
		"FOUNDATION_EXPORT MobileNode* _Nullable MobileStart(NSString* _Nullable configJSON, NSString* _Nullable dataDir, id<MobileLogger> _Nullable logger, NSError* _Nullable* _Nullable error);",
		"FOUNDATION_EXPORT NSString* _Nonnull MobileVersion(void);",
		"@interface MobileNode : NSObject",
		"- (MobileRequest* _Nullable)ask:(NSString* _Nullable)requestJSON h:(id<MobileAskHandler> _Nullable)h error:(NSError* _Nullable* _Nullable)error;",
		"- (NSString* _Nonnull)identity:(NSError* _Nullable* _Nullable)error;",
		"- (NSString* _Nonnull)status:(NSError* _Nullable* _Nullable)error;",
		"- (NSString* _Nonnull)peers:(NSError* _Nullable* _Nullable)error;",
		"- (NSString* _Nonnull)apiAddr;",
		"- (BOOL)reportPower:(long)batteryPercent charging:(BOOL)charging thermal:(NSString* _Nullable)thermal error:(NSError* _Nullable* _Nullable)error;",
		"- (BOOL)stop:(NSError* _Nullable* _Nullable)error;",
		"@interface MobileRequest : NSObject",
		"- (void)cancel;",
		"- (void)waitDone;",
		"@protocol MobileAskHandler <NSObject>",
		"- (BOOL)onToken:(NSString* _Nullable)text error:(NSError* _Nullable* _Nullable)error;",
		"- (BOOL)onEvent:(NSString* _Nullable)name json:(NSString* _Nullable)json error:(NSError* _Nullable* _Nullable)error;",
		"- (BOOL)onDone:(NSString* _Nullable)resultJSON error:(NSError* _Nullable* _Nullable)error;",
		"- (BOOL)onError:(NSString* _Nullable)kind message:(NSString* _Nullable)message error:(NSError* _Nullable* _Nullable)error;",
		"@protocol MobileLogger <NSObject>",
		"- (BOOL)log:(NSString* _Nullable)level line:(NSString* _Nullable)line error:(NSError* _Nullable* _Nullable)error;",
	} {
		if !strings.Contains(h, want) {
			t.Errorf("%s lacks %s", filepath.Base(path), want)
		}
	}
}

func run(t *testing.T, dir string, env []string, name string, args ...string) {
	t.Helper()
	runOut(t, dir, env, name, args...)
}

func runOut(t *testing.T, dir string, env []string, name string, args ...string) []byte {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, lastLines(stderr.String(), 40))
	}
	return out
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	writeFile(t, to, string(readFile(t, from)))
}

func readFile(t *testing.T, p string) []byte {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func writeFile(t *testing.T, p, s string) {
	t.Helper()
	if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}

// lockedBuffer is an io.Writer safe to read while a process writes it.
type lockedBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
