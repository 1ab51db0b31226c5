#include "platform/grants.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "platform/forbidden.h"
#include "platform/sandbox_os.h"

int sandbox_places_push(struct sandbox_places *l, char *path, struct sandbox_os_place *os) {
  struct sandbox_place *p = path ? malloc(sizeof(*p)) : NULL;
  struct sandbox_place **v = p ? realloc(l->v, (l->n + 1) * sizeof(*v)) : NULL;
  if (!v) {
    free(p);
    free(path);
    sandbox_os_place_free(os);
    return -ENOMEM;
  }
  p->path = path;
  p->os = os;
  l->v = v;
  l->v[l->n++] = p;
  return 0;
}

void sandbox_places_release(struct sandbox_places *l) {
  for (size_t i = 0; i < l->n; i++) {
    sandbox_os_place_free(l->v[i]->os);
    free(l->v[i]->path);
    free(l->v[i]);
  }
  free(l->v);
  l->v = NULL;
  l->n = 0;
}

static char fold(char c, bool fold_case) {
  return fold_case && c >= 'A' && c <= 'Z' ? (char)(c - 'A' + 'a') : c;
}

bool sandbox_path_within(const char *inner, const char *outer, char sep, bool fold_case) {
  size_t lo = strlen(outer);
  while (lo > 0 && outer[lo - 1] == sep)
    lo--;
  for (size_t i = 0; i < lo; i++)
    if (fold(inner[i], fold_case) != fold(outer[i], fold_case))
      return false; /* also when inner is shorter: its NUL differs */
  return inner[lo] == '\0' || inner[lo] == sep;
}

static bool same_place(const struct sandbox_place *a, const struct sandbox_place *b) {
  return sandbox_os_place_within(a, b) && sandbox_os_place_within(b, a);
}

/* What every grant is judged against. The secrets are the result's: the
 * OS layer hides those inside read-only grants. */
struct judge {
  struct sandbox_places root, home, roots, autorun, secret_names;
  bool *root_hidden; /* roots.v[i] names a hidden entry of the home */
  struct sandbox_places *secrets;
};

static void judge_release(struct judge *j) {
  sandbox_places_release(&j->root);
  sandbox_places_release(&j->home);
  sandbox_places_release(&j->roots);
  sandbox_places_release(&j->autorun);
  sandbox_places_release(&j->secret_names);
  free(j->root_hidden);
}

/* path relative to base if it lies below it ("" for base itself), '/' or
 * '\\' separated; NULL otherwise. */
static const char *rel_below(const char *path, const char *base) {
  size_t n = strlen(base);
  while (n > 1 && (base[n - 1] == '/' || base[n - 1] == '\\'))
    n--;
  if (strncmp(path, base, n) != 0)
    return NULL;
  if (path[n] == '\0')
    return path + n;
  if (base[n - 1] == '/' || base[n - 1] == '\\') /* a root: "/", "C:\\" */
    return path + n;
  return path[n] == '/' || path[n] == '\\' ? path + n + 1 : NULL;
}

static const char *home_rel(const struct judge *j, const char *path) {
  return j->home.n ? rel_below(path, j->home.v[0]->path) : NULL;
}

/* Does a component of rel start with '.' (".git", "a/.envrc/b")? */
static bool has_hidden_component(const char *rel) {
  for (const char *c = rel; *c; c++)
    if (*c == '.' && (c == rel || c[-1] == '/' || c[-1] == '\\'))
      return true;
  return false;
}

/* Is path a hidden (or ~/bin-like) entry of the home, or inside one? */
static bool in_home_hidden(const struct judge *j, const char *path) {
  const char *rel = home_rel(j, path);
  if (!rel || !*rel)
    return false;
  char buf[4096];
  size_t i = 0;
  for (; rel[i] && i < sizeof(buf) - 1; i++)
    buf[i] = rel[i] == '\\' ? '/' : rel[i];
  buf[i] = '\0';
  return forbidden_home_hidden(buf);
}

/* "~", "~/x" or "/x" (agent config) as a base and a path. */
static enum sandbox_place_base split(const char *p, const char **out_path) {
  if (p[0] == '~') {
    *out_path = p + 1 + (p[1] == '/');
    return SANDBOX_BASE_HOME;
  }
  *out_path = p;
  return SANDBOX_BASE_ROOT;
}

static enum sandbox_place_base row_base(const struct forbidden_row *row) {
  return row->base == FORBIDDEN_HOME ? SANDBOX_BASE_HOME : SANDBOX_BASE_ROOT;
}

static int judge_init(struct judge *j, const struct sandbox_policy *policy,
                      const struct sandbox_os_probe *os, bool has_home,
                      struct sandbox_places *secrets) {
  memset(j, 0, sizeof(*j));
  j->secrets = secrets;
  int r = sandbox_os_place_add(os, SANDBOX_BASE_ROOT, "/", SANDBOX_PLACE_GRANT, &j->root);
  if (r < 0 || j->root.n != 1)
    return r == -ENOMEM ? r : -EIO;
  /* unreachable homes and roots are left out: they admit nothing */
  if (has_home &&
      sandbox_os_place_add(os, SANDBOX_BASE_HOME, "", SANDBOX_PLACE_GRANT, &j->home) == -ENOMEM)
    return -ENOMEM;
  for (size_t i = 0; i < policy->n_grant_roots; i++) {
    const char *path;
    enum sandbox_place_base base = split(policy->grant_roots[i], &path);
    if (base == SANDBOX_BASE_HOME && !has_home)
      continue;
    if (sandbox_os_place_add(os, base, path, SANDBOX_PLACE_GRANT, &j->roots) == -ENOMEM)
      return -ENOMEM;
  }
  if (j->roots.n && !(j->root_hidden = calloc(j->roots.n, sizeof(*j->root_hidden))))
    return -ENOMEM;
  for (size_t i = 0; i < j->roots.n; i++)
    j->root_hidden[i] =
        in_home_hidden(j, j->roots.v[i]->path) || has_hidden_component(j->roots.v[i]->path);
  for (const struct forbidden_row *row = NULL; (row = forbidden_next(FORBIDDEN_SECRET, row));) {
    if (row->base == FORBIDDEN_HOME && !has_home)
      continue;
    if (sandbox_os_place_add(os, row_base(row), row->path, SANDBOX_PLACE_SECRET, j->secrets) ==
        -ENOMEM)
      return -ENOMEM;
    if (!strchr(row->path, '*') &&
        sandbox_os_place_add(os, row_base(row), row->path, SANDBOX_PLACE_NAME, &j->secret_names) ==
            -ENOMEM)
      return -ENOMEM;
  }
  if (policy->state_dir && sandbox_os_place_add(os, SANDBOX_BASE_HOST, policy->state_dir,
                                                SANDBOX_PLACE_SECRET, j->secrets) == -ENOMEM)
    return -ENOMEM;
  for (const struct forbidden_row *row = NULL;
       has_home && (row = forbidden_next(FORBIDDEN_AUTORUN, row));) {
    if (sandbox_os_place_add(os, row_base(row), row->path, SANDBOX_PLACE_NAME, &j->autorun) ==
        -ENOMEM)
      return -ENOMEM;
  }
  return 0;
}

/* Rules 3 to 6 for the resolved grant p; secrets inside a read-only grant
 * are collected in out. */
static int judge_place(const struct judge *j, const struct manifest_grant *g,
                       const struct sandbox_place *p, struct sandbox_grant *out,
                       struct cordon_diag *diag) {
  if (same_place(p, j->root.v[0]) || (j->home.n && same_place(p, j->home.v[0])))
    return cordon_diag_set(diag, CORDON_E_SCOPE_TOO_BROAD, "grant %s resolves to %s: too broad",
                           g->path, p->path);
  /* a grant holding the home holds all of its hidden entries */
  if (j->home.n && sandbox_os_place_within(j->home.v[0], p))
    return cordon_diag_set(diag, CORDON_E_SCOPE_TOO_BROAD,
                           "grant %s contains the job user's home %s: too broad", g->path,
                           j->home.v[0]->path);
  bool under_root = false;
  for (size_t i = 0; i < j->roots.n && !under_root; i++)
    under_root = sandbox_os_place_within(p, j->roots.v[i]);
  if (!under_root)
    return cordon_diag_set(diag, CORDON_E_CAPABILITY_DENIED,
                           "grant %s (%s) is not under any of the owner's grant roots", g->path,
                           p->path);
  if (in_home_hidden(j, p->path)) {
    bool named = false;
    for (size_t i = 0; i < j->roots.n && !named; i++)
      named = j->root_hidden[i] && sandbox_os_place_within(p, j->roots.v[i]);
    if (!named)
      return cordon_diag_set(diag, CORDON_E_CAPABILITY_DENIED,
                             "grant %s (%s) is a hidden or bin entry of the home: the owner's "
                             "grant roots must name it explicitly",
                             g->path, p->path);
  }
  /* a writable grant of a hidden entry below its root (~/proj/.git):
   * every hidden entry inside a writable grant is read-only, so one that
   * is the grant itself needs the ceiling to name it as well */
  if (g->rw) {
    bool allowed = false;
    for (size_t i = 0; i < j->roots.n && !allowed; i++) {
      if (!sandbox_os_place_within(p, j->roots.v[i]))
        continue;
      const char *rel = rel_below(p->path, j->roots.v[i]->path);
      allowed = j->root_hidden[i] || (rel && !has_hidden_component(rel));
    }
    if (!allowed)
      return cordon_diag_set(diag, CORDON_E_CAPABILITY_DENIED,
                             "writable grant %s (%s) is or lies inside a hidden entry: the "
                             "owner's grant roots must name it explicitly",
                             g->path, p->path);
  }
  for (size_t i = 0; i < j->secrets->n; i++)
    if (sandbox_os_place_within(p, j->secrets->v[i]))
      return cordon_diag_set(diag, CORDON_E_CAPABILITY_DENIED,
                             "grant %s is the forbidden path %s or lies inside it", g->path,
                             j->secrets->v[i]->path);
  for (size_t i = 0; i < j->secrets->n; i++) {
    const struct sandbox_place *s = j->secrets->v[i];
    if (!sandbox_os_place_within(s, p))
      continue;
    if (g->rw)
      return cordon_diag_set(diag, CORDON_E_SCOPE_TOO_BROAD,
                             "writable grant %s contains the forbidden path %s", g->path, s->path);
    const struct sandbox_place **h = realloc(out->hidden, (out->n_hidden + 1) * sizeof(*h));
    if (!h)
      return -ENOMEM;
    out->hidden = h;
    h[out->n_hidden++] = s;
  }
  /* a secret that is absent now but would appear inside the grant during
   * the job could not be hidden: no placeholder is created on the host */
  for (size_t i = 0; i < j->secret_names.n; i++) {
    const struct sandbox_place *nm = j->secret_names.v[i];
    if (!sandbox_os_place_within(nm, p))
      continue;
    bool present = false;
    for (size_t k = 0; k < j->secrets->n && !present; k++)
      present = strcmp(j->secrets->v[k]->path, nm->path) == 0;
    if (!present)
      return cordon_diag_set(diag, CORDON_E_SCOPE_TOO_BROAD,
                             "grant %s contains the forbidden path %s (absent now; created during "
                             "the job it could not be hidden)",
                             g->path, nm->path);
  }
  for (size_t i = 0; g->rw && i < j->autorun.n; i++)
    if (sandbox_os_place_within(j->autorun.v[i], p))
      return cordon_diag_set(
          diag, CORDON_E_SCOPE_TOO_BROAD,
          "writable grant %s contains %s, where written code runs outside the sandbox", g->path,
          j->autorun.v[i]->path);
  return 0;
}

static int judge_grant(struct judge *j, const struct sandbox_os_probe *os, bool has_home,
                       const struct manifest_grant *g, struct sandbox_places *own,
                       struct sandbox_grant *out, struct cordon_diag *diag) {
  out->g = g;
  if (g->base == MANIFEST_GRANT_WORKSPACE)
    return 0;                                  /* the workspace is always there, and writable */
  int r = manifest_grant_scope_check(g, diag); /* too broad anywhere */
  if (r < 0)
    return r;
  if (g->base == MANIFEST_GRANT_HOME && !has_home)
    return cordon_diag_set(diag, CORDON_E_CAPABILITY_DENIED,
                           "grant %s: the job user has no home directory", g->path);
  size_t before = own->n;
  r = g->base == MANIFEST_GRANT_HOME
          ? sandbox_os_place_add(os, SANDBOX_BASE_HOME, g->rel, SANDBOX_PLACE_GRANT, own)
          : sandbox_os_place_add(os, SANDBOX_BASE_ROOT, g->path, SANDBOX_PLACE_GRANT, own);
  if (r == 0 && own->n != before + 1)
    r = -ENOENT;
  if (r < 0)
    return r == -ENOMEM ? r
                        : cordon_diag_set(diag, CORDON_E_CAPABILITY_DENIED, "grant %s: %s", g->path,
                                          strerror(-r));
  out->place = own->v[before];
  return judge_place(j, g, out->place, out, diag);
}

void sandbox_grants_release(struct sandbox_grants *g) {
  for (size_t i = 0; i < g->n; i++)
    free(g->v[i].hidden);
  free(g->v);
  sandbox_places_release(&g->places);
  sandbox_places_release(&g->secrets);
  memset(g, 0, sizeof(*g));
}

int sandbox_grants_check(const struct sandbox_policy *policy, const struct sandbox_os_probe *os,
                         bool has_home, const struct manifest *m, struct sandbox_grants *out,
                         struct cordon_diag *diag) {
  struct judge j;
  struct sandbox_grants gs = {0};
  int r = judge_init(&j, policy, os, has_home, &gs.secrets);
  if (r < 0)
    goto out;
  if (m->n_grants && !(gs.v = calloc(m->n_grants, sizeof(*gs.v)))) {
    r = -ENOMEM;
    goto out;
  }
  for (size_t i = 0; i < m->n_grants; i++) {
    gs.n = i + 1;
    r = judge_grant(&j, os, has_home, &m->grants[i], &gs.places, &gs.v[i], diag);
    if (r < 0)
      goto out;
  }
  *out = gs;
  memset(&gs, 0, sizeof(gs));
  r = 0;
out:
  sandbox_grants_release(&gs);
  judge_release(&j);
  return r;
}
