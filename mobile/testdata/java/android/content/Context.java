package android.content;

/**
 * A host stand-in for Android's Context, for the binding test only:
 * gobind's go.Seq names the type in setContext, which an Android app calls
 * with its application context and the test never calls.
 */
public class Context {
}
