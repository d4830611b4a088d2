/*
 * A host stand-in for the NDK's <android/log.h>, for the binding test
 * only: gobind's JNI glue logs through Android's liblog, which a Linux
 * host lacks. liblog.c beside it writes the same lines to stderr.
 */
#ifndef HOST_ANDROID_LOG_H
#define HOST_ANDROID_LOG_H

typedef enum android_LogPriority {
	ANDROID_LOG_UNKNOWN = 0,
	ANDROID_LOG_DEFAULT,
	ANDROID_LOG_VERBOSE,
	ANDROID_LOG_DEBUG,
	ANDROID_LOG_INFO,
	ANDROID_LOG_WARN,
	ANDROID_LOG_ERROR,
	ANDROID_LOG_FATAL,
	ANDROID_LOG_SILENT,
} android_LogPriority;

int __android_log_print(int prio, const char *tag, const char *fmt, ...);

#endif
