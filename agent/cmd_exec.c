/* cordon-agent exec|explain DIR|FILE.cpkg: stage a package locally, plan
 * its sandbox, and run it (exec) or print the plan (explain). */
#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>

#include "agent/cli.h"
#include "agent/commands.h"
#include "agent/job.h"
#include "compat/posix.h"
#include "platform/sandbox.h"

/* Print the result JSON and the one-line error; return the exit status. */
static int finish_job(const struct job_result *res) {
  json_t *j = job_result_to_json(res);
  if (j) {
    agent_print_json(j);
    json_decref(j);
  }
  if (res->error) {
    agent_say_error(res->error, res->error_message);
    return 1;
  }
  if (res->timed_out) {
    fprintf(stderr, AGENT_PROG ": timed_out: the job did not finish in time\n");
    return 1;
  }
  return res->ran && res->exited && res->exit_code == 0 ? 0 : 1;
}

int agent_cmd_exec(const struct agent_config *cfg, const char *source, const char *trust_file,
                   char *const *args, size_t n_args, bool explain) {
  struct agent_job job;
  struct cordon_diag diag = {{0}};
  int rc;
  int r = agent_job_prepare(&job, cfg, source, trust_file, &diag);
  if (r < 0) {
    if (job.result.error) { /* a refused package: the job was attempted */
      rc = finish_job(&job.result);
    } else {
      agent_say_error(
          r == CORDON_E_MANIFEST_INVALID || r == CORDON_E_PACKAGE_TOO_LARGE ? r : CORDON_E_USAGE,
          diag.msg);
      rc = 2;
    }
    goto out;
  }
  r = agent_job_plan(&job, args, n_args, false);
  if (r < 0 && !job.result.error)
    job_result_fail(&job.result, r, "%s", cordon_err_message(r));
  if (explain) {
    if (r < 0) {
      rc = finish_job(&job.result);
      goto out;
    }
    json_t *j = sandbox_plan_explain(job.plan);
    agent_print_json(j);
    json_decref(j);
    rc = 0;
    goto out;
  }
  if (r == 0) {
    r = sandbox_run(job.plan, &job.result);
    if (r < 0 && !job.result.error)
      job_result_fail(&job.result, r, "%s", cordon_err_message(r));
  }
  rc = finish_job(&job.result);
out:
  agent_job_release(&job);
  return rc;
}
