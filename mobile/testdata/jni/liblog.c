/*
 * liblog for a Linux host, for the binding test only: the one function of
 * Android's liblog that gobind's JNI glue calls, writing to stderr.
 */
#include <stdarg.h>
#include <stdio.h>
#include "android/log.h"

int __android_log_print(int prio, const char *tag, const char *fmt, ...) {
	static const char *names = "??VDIWEFS";
	va_list ap;
	int n;
	fprintf(stderr, "%c/%s: ", prio >= 0 && prio <= ANDROID_LOG_SILENT ? names[prio] : '?', tag);
	va_start(ap, fmt);
	n = vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	return n;
}
