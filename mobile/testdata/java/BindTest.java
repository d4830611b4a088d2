import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

import mobile.AskHandler;
import mobile.Mobile;
import mobile.Node;
import mobile.Request;

/**
 * Drives the gobind-generated Java API of package mobile on a host JVM,
 * as an Android app would: start a peer, see the Go test's role peer, ask
 * it with streamed tokens, cancel, report a low battery, stop. Run by
 * mobile/bind_test.go, which checks what it writes to OUT_DIR.
 *
 * Usage: java BindTest BOOTSTRAP_ADDR ROLE_PEER_ID DATA_DIR OUT_DIR
 */
public final class BindTest {
	static void check(boolean ok, String what) {
		if (!ok) {
			throw new AssertionError(what);
		}
	}

	/** Collects one request's calls. */
	static class Collect implements AskHandler {
		final StringBuilder tokens = new StringBuilder();
		final List<String> events = Collections.synchronizedList(new ArrayList<>());
		final CountDownLatch first = new CountDownLatch(1);
		final CountDownLatch end = new CountDownLatch(1);
		volatile int nTokens, ends;
		volatile String result;
		volatile String kind, message;

		@Override public void onToken(String text) {
			check(ends == 0, "onToken after the end");
			tokens.append(text);
			nTokens++;
			first.countDown();
		}

		@Override public void onEvent(String name, String json) {
			check(ends == 0, "onEvent after the end");
			events.add(name);
		}

		@Override public void onDone(String resultJSON) {
			ends++;
			result = resultJSON;
			end.countDown();
		}

		@Override public void onError(String kind, String message) {
			ends++;
			this.kind = kind;
			this.message = message;
			end.countDown();
		}
	}

	public static void main(String[] args) throws Exception {
		String boot = args[0], rolePeer = args[1], dataDir = args[2];
		Path out = Path.of(args[3]);
		List<String> logs = Collections.synchronizedList(new ArrayList<>());

		System.out.println("VERSION " + Mobile.version());

		// A bad config is refused with an exception that names the key.
		try {
			Mobile.start("{\"bogus\":1}", dataDir, null);
			throw new AssertionError("a config with an unknown key started");
		} catch (Exception e) {
			check(e.getMessage().contains("bogus"), "bad config error: " + e.getMessage());
		}

		String config = "{\"listen\":[\"/ip4/127.0.0.1/tcp/0\"],\"bootstrap\":[\"" + boot
				+ "\"],\"no_mdns\":true,\"nat\":{\"port_mapping\":\"off\"}}";
		Node node = Mobile.start(config, dataDir, (level, line) -> logs.add(level + " " + line));
		check(node.apiAddr().equals("off"), "API on by default: " + node.apiAddr());
		String identity = node.identity();
		Matcher m = Pattern.compile("\"peer_id\":\"([^\"]+)\"").matcher(identity);
		check(m.find(), "no peer_id in " + identity);
		String self = m.group(1);

		// See the role peer, alive and serving the reasoner role.
		String peers = "";
		long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(60);
		while (!(peers.contains("\"peer_id\":\"" + rolePeer + "\",\"self\":false,\"alive\":true")
				&& peers.contains("\"role\":\"reasoner\""))) {
			check(System.nanoTime() < deadline, "the role peer is not seen within 60s: " + peers);
			Thread.sleep(100);
			peers = node.peers();
		}
		System.out.println("PEER " + rolePeer);

		// A bad request is refused at once, with what is wrong.
		try {
			node.ask("{\"query\":\"hi\",\"bogus\":true}", new Collect());
			throw new AssertionError("a request with an unknown field was taken");
		} catch (Exception e) {
			check(e.getMessage().contains("unknown field \"bogus\""), "bad request error: " + e.getMessage());
		}

		// Ask, with the tokens streamed.
		Collect c = new Collect();
		Request r = node.ask("{\"query\":\"Tell me a story.\",\"mode\":\"reasoner\",\"max_tokens\":24,\"temperature\":0}", c);
		r.waitDone();
		check(c.ends == 1 && c.result != null, "ask ended with " + c.kind + " " + c.message);
		check(c.nTokens > 1, "tokens: " + c.nTokens);
		check(c.events.contains("agent"), "events: " + c.events);
		Files.writeString(out.resolve("tokens.txt"), c.tokens.toString(), StandardCharsets.UTF_8);
		Files.writeString(out.resolve("result.json"), c.result, StandardCharsets.UTF_8);
		System.out.println("ASKED " + c.nTokens + " tokens");

		// Cancel after the first token.
		Collect cc = new Collect();
		Request rc = node.ask("{\"query\":\"Tell me a long story.\",\"mode\":\"reasoner\",\"max_tokens\":400,\"temperature\":0}", cc);
		check(cc.first.await(60, TimeUnit.SECONDS), "no first token");
		rc.cancel();
		check(cc.end.await(60, TimeUnit.SECONDS), "no end after cancel");
		check(cc.ends == 1 && "cancelled".equals(cc.kind),
				"cancelled: " + cc.ends + " " + cc.kind + " " + cc.message);
		System.out.println("CANCELLED after " + cc.nTokens + " tokens");

		// An exception thrown in a handler comes back to Go as an error:
		// the request is cancelled and ends with handler_error.
		Collect thrower = new Collect() {
			@Override public void onToken(String text) {
				super.onToken(text);
				throw new IllegalStateException("boom in onToken");
			}
		};
		node.ask("{\"query\":\"Tell me a long story.\",\"mode\":\"reasoner\",\"max_tokens\":400,\"temperature\":0}", thrower).waitDone();
		check(thrower.ends == 1 && thrower.nTokens == 1 && "handler_error".equals(thrower.kind)
				&& thrower.message.contains("boom in onToken"),
				"thrown: " + thrower.nTokens + " tokens, " + thrower.kind + " " + thrower.message);
		System.out.println("THROWN " + thrower.message);

		// 10% and not charging: the peer stops taking work and says why.
		node.reportPower(10, false, "nominal");
		String status = node.status();
		check(status.contains("\"taking_work\":false") && status.contains("battery at 10%"), "status: " + status);
		Files.writeString(out.resolve("status.json"), status, StandardCharsets.UTF_8);
		try {
			node.reportPower(50, false, "warm");
			throw new AssertionError("thermal \"warm\" accepted");
		} catch (Exception e) {
			check(e.getMessage().contains("thermal"), "bad thermal error: " + e.getMessage());
		}
		// The Go side checks that the swarm sees it, then lets us stop.
		System.out.println("REPORTED " + self);
		String go = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8)).readLine();
		check("stop".equals(go), "told " + go);

		node.stop();
		node.stop();
		try {
			node.status();
			throw new AssertionError("status answered after stop");
		} catch (Exception e) {
			check(e.getMessage().contains("not running"), "after stop: " + e.getMessage());
		}
		Files.write(out.resolve("log.txt"), new ArrayList<>(logs), StandardCharsets.UTF_8);
		System.out.println("OK");
		// Threads Go attached to the JVM to call back into Java are not
		// daemons: the JVM would wait for them forever.
		System.exit(0);
	}
}
