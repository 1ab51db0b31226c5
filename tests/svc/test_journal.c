/* svc/journal.c without a journal: field names, priorities, and when
 * JOURNAL_STREAM names stderr. The writer itself is tested through the
 * daemons (tests/server/test_journal.c, tests/agent/test_journal_agent.c). */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>

#include "svc/journal.h"

Test(journal, field_names_are_upper_case_and_prefixed) {
  char buf[64];
  journal_field_name("job", buf, sizeof(buf));
  cr_assert_str_eq(buf, "CORDON_JOB");
  journal_field_name("exit_code", buf, sizeof(buf));
  cr_assert_str_eq(buf, "CORDON_EXIT_CODE");
  journal_field_name("a.b-c=d", buf, sizeof(buf));
  cr_assert_str_eq(buf, "CORDON_A_B_C_D");
  journal_field_name("", buf, sizeof(buf));
  cr_assert_str_eq(buf, "CORDON_");
  journal_field_name("abcdefghijklmnopqrstuvwxyz", buf, 12);
  cr_assert_str_eq(buf, "CORDON_ABCD", "cut to the buffer");
}

Test(journal, levels_are_syslog_priorities) {
  cr_assert_eq(journal_priority(CORE_LOG_DEBUG), 7);
  cr_assert_eq(journal_priority(CORE_LOG_INFO), 6);
  cr_assert_eq(journal_priority(CORE_LOG_WARN), 4);
  cr_assert_eq(journal_priority(CORE_LOG_ERROR), 3);
}

Test(journal, journal_stream_must_name_stderr_itself) {
  struct stat st;
  cr_assert_eq(fstat(2, &st), 0);
  char v[64];
  snprintf(v, sizeof(v), "%llu:%llu", (unsigned long long)st.st_dev, (unsigned long long)st.st_ino);
  setenv("JOURNAL_STREAM", v, 1);
  cr_assert(journal_stream_is_stderr());
  snprintf(v, sizeof(v), "%llu:%llu", (unsigned long long)st.st_dev,
           (unsigned long long)st.st_ino + 1);
  setenv("JOURNAL_STREAM", v, 1); /* inherited by a child whose stderr went elsewhere */
  cr_assert(!journal_stream_is_stderr());
  setenv("JOURNAL_STREAM", "garbage", 1);
  cr_assert(!journal_stream_is_stderr());
  unsetenv("JOURNAL_STREAM");
  cr_assert(!journal_stream_is_stderr());
}
