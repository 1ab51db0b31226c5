#include "agent/config.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "compat/posix.h"
#include "platform/paths.h"

#define BAD(...) cordon_diag_set(diag, CORDON_E_CONFIG_INVALID, "config.json: " __VA_ARGS__)

static int str_list(json_t *v, const char *field, bool paths, char ***out, size_t *out_n,
                    struct cordon_diag *diag) {
  if (!json_is_array(v) || json_array_size(v) > 64)
    return BAD("field '%s': expected an array of at most 64 strings", field);
  size_t n = json_array_size(v);
  char **list = calloc(n + 1, sizeof(*list));
  if (!list)
    return -ENOMEM;
  for (size_t i = 0; i < n; i++) {
    json_t *s = json_array_get(v, i);
    const char *str = json_string_value(s);
    if (!json_is_string(s) || json_string_length(s) == 0 || strlen(str) != json_string_length(s) ||
        json_string_length(s) >= PATH_MAX ||
        (paths && !(str[0] == '/' || (str[0] == '~' && (str[1] == '\0' || str[1] == '/')))) ||
        (paths && strstr(str, "/..") != NULL)) {
      for (size_t k = 0; k < i; k++)
        free(list[k]);
      free(list);
      return BAD("field '%s[%zu]': expected %s", field, i,
                 paths ? "an absolute path or one starting with ~" : "a non-empty string");
    }
    list[i] = strdup(str);
    if (!list[i]) {
      for (size_t k = 0; k < i; k++)
        free(list[k]);
      free(list);
      return -ENOMEM;
    }
  }
  *out = list;
  *out_n = n;
  return 0;
}

static int replace_str(char **dst, json_t *v, const char *field, bool abs_path,
                       struct cordon_diag *diag) {
  const char *s = json_string_value(v);
  if (!json_is_string(v) || json_string_length(v) == 0 || strlen(s) != json_string_length(v) ||
      json_string_length(v) > 255 || (abs_path && s[0] != '/'))
    return BAD("field '%s': expected %s", field,
               abs_path ? "an absolute path" : "a non-empty string");
  char *c = strdup(s);
  if (!c)
    return -ENOMEM;
  free(*dst);
  *dst = c;
  return 0;
}

static int parse(json_t *root, struct agent_config *c, struct cordon_diag *diag) {
  if (!json_is_object(root))
    return BAD("the top level must be an object");
  const char *key;
  json_t *v;
  json_object_foreach(root, key, v) {
    int r = 0;
    if (strcmp(key, "net") == 0) {
      if (!json_is_boolean(v))
        return BAD("field 'net': expected a boolean");
      c->net = json_is_true(v);
    } else if (strcmp(key, "grant_roots") == 0) {
      for (size_t i = 0; i < c->n_grant_roots; i++)
        free(c->grant_roots[i]);
      free(c->grant_roots);
      c->grant_roots = NULL;
      c->n_grant_roots = 0;
      r = str_list(v, "grant_roots", true, &c->grant_roots, &c->n_grant_roots, diag);
    } else if (strcmp(key, "lowest_level") == 0) {
      if (!json_is_string(v) || sandbox_level_parse(json_string_value(v), &c->lowest_level) < 0)
        return BAD("field 'lowest_level': expected \"isolated\", \"contained\" or \"none\"");
    } else if (strcmp(key, "job_user") == 0) {
      r = replace_str(&c->job_user, v, "job_user", false, diag);
    } else if (strcmp(key, "bwrap_path") == 0) {
      r = replace_str(&c->bwrap_path, v, "bwrap_path", true, diag);
    } else if (strcmp(key, "trusted_publishers") == 0) {
      r = str_list(v, "trusted_publishers", true, &c->trusted_publishers, &c->n_trusted_publishers,
                   diag);
    } else if (strcmp(key, "max_jobs") == 0) {
      if (!json_is_integer(v) || json_integer_value(v) < 1 || json_integer_value(v) > 64)
        return BAD("field 'max_jobs': expected an integer in 1..64");
      c->max_jobs = (unsigned)json_integer_value(v);
    } else {
      return BAD("field '%.64s': unknown key", key);
    }
    if (r < 0)
      return r;
  }
  return 0;
}

int agent_config_load(const char *dir, struct agent_config **out_config, struct cordon_diag *diag) {
  char dflt[PATH_MAX];
  if (!dir) {
    int r = paths_agent_config_dir(dflt, sizeof(dflt));
    if (r < 0)
      return cordon_diag_set(diag, r, "cannot find a default config directory");
    dir = dflt;
  }
  struct agent_config *c = calloc(1, sizeof(*c));
  if (!c)
    return -ENOMEM;
  c->refs = 1;
  c->net = true;
  c->lowest_level = paths_default_lowest_level();
  c->max_jobs = 4;
  c->dir = strdup(dir);
  c->job_user = strdup("cordon-job");
  c->bwrap_path = strdup("/usr/bin/bwrap");
  c->grant_roots = calloc(2, sizeof(char *));
  int r = -ENOMEM;
  if (!c->dir || !c->job_user || !c->bwrap_path || !c->grant_roots ||
      !(c->grant_roots[0] = strdup("~")))
    goto out_fail;
  c->n_grant_roots = 1;

  char path[PATH_MAX + 16];
  snprintf(path, sizeof(path), "%s/config.json", dir);
  int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK); /* never wait on a FIFO */
  if (fd < 0) {
    if (errno == ENOENT || errno == ENOTDIR) {
      *out_config = c;
      return 0;
    }
    r = cordon_diag_set(diag, CORDON_E_CONFIG_INVALID, "cannot open %s: %s", path, strerror(errno));
    goto out_fail;
  }
  struct stat st;
  if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_size > AGENT_CONFIG_MAX_BYTES) {
    close(fd);
    r = BAD("not a regular file of at most %d bytes", AGENT_CONFIG_MAX_BYTES);
    goto out_fail;
  }
  json_error_t jerr;
  json_t *root = json_loadfd(fd, JSON_REJECT_DUPLICATES, &jerr);
  close(fd);
  if (!root) {
    r = BAD("not valid JSON: %s (line %d)", jerr.text, jerr.line);
    goto out_fail;
  }
  r = parse(root, c, diag);
  json_decref(root);
  if (r < 0)
    goto out_fail;
  *out_config = c;
  return 0;
out_fail:
  agent_config_free(c);
  return r;
}

void agent_config_free(struct agent_config *c) {
  if (!c || --c->refs > 0)
    return;
  for (size_t i = 0; i < c->n_grant_roots; i++)
    free(c->grant_roots[i]);
  free(c->grant_roots);
  for (size_t i = 0; i < c->n_trusted_publishers; i++)
    free(c->trusted_publishers[i]);
  free(c->trusted_publishers);
  free(c->dir);
  free(c->job_user);
  free(c->bwrap_path);
  free(c);
}

void agent_config_policy(const struct agent_config *c, struct sandbox_policy *out_policy) {
  out_policy->net_allowed = c->net;
  out_policy->grant_roots = (const char *const *)c->grant_roots;
  out_policy->n_grant_roots = c->n_grant_roots;
  out_policy->lowest_level = c->lowest_level;
  out_policy->job_user = c->job_user;
  out_policy->bwrap_path = c->bwrap_path;
  out_policy->state_dir = c->dir;
}

const struct agent_config *agent_config_ref(const struct agent_config *c) {
  ((struct agent_config *)c)->refs++;
  return c;
}

void agent_config_grant_roots_text(const struct agent_config *c, char *buf, size_t buf_len) {
  size_t o = 0;
  buf[0] = '\0';
  for (size_t i = 0; i < c->n_grant_roots && o < buf_len; i++) {
    int n = snprintf(buf + o, buf_len - o, "%s%s", i ? "," : "", c->grant_roots[i]);
    if (n < 0)
      break;
    o += (size_t)n;
  }
}
