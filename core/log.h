/* The daemons' log: one line per event on stderr, "<program>: <message>".
 * Library code does not log; the programs and their daemons do,
 * through this one function, so the format is decided in one place. */
#ifndef CORDON_CORE_LOG_H
#define CORDON_CORE_LOG_H

/* The prefix of every line; a static string ("cordon-server"). */
void core_log_set_program(const char *name);
/* One line: the prefix, ": ", the formatted message, a newline. */
void core_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif
