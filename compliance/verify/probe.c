/* The verifier's probe: preloaded (LD_PRELOAD) into the kernel's process before the interpreter starts.
 *
 * It records, between two marks the kernel's process sets around each call of the kernel, which code
 * ran, and writes that to a pipe the verifier reads (file descriptor PROBE_FD), not through Python:
 *  - CPU: the extension's own sources are compiled with -finstrument-functions, so every function of
 *    them calls __cyg_profile_func_enter; the probe records each distinct function address and, at the
 *    end mark, its object file and offset (the verifier maps them to symbols with nm).
 *  - GPU (built with -DCOMPLIANCE_WITH_CUPTI): CUDA's profiling interface (CUPTI callbacks on the
 *    runtime and driver APIs) names every kernel launched, however it was launched (runtime, driver,
 *    NVRTC, Triton); the probe records each distinct name.
 * The constructor removes LD_PRELOAD from the environment, so neither the interpreter nor the kernel
 * sees a variable of the verifier. Records: "B idx run", "F path\toffset", "K name", "E idx run". */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#ifdef COMPLIANCE_WITH_CUPTI
#include <cupti.h>
#endif

#define PROBE_FD 1019
#define SLOTS 4096
#define NAMES 512

static void *volatile entered[SLOTS];
static volatile int active;
static int probe_fd = -1;
static pthread_mutex_t names_lock = PTHREAD_MUTEX_INITIALIZER;
static char *names[NAMES];
static int name_count;

__attribute__((no_instrument_function)) static void put(const char *text) {
  size_t n = strlen(text);
  while (n > 0 && probe_fd >= 0) {
    ssize_t w = write(probe_fd, text, n);
    if (w <= 0) return;
    text += w;
    n -= (size_t)w;
  }
}

__attribute__((no_instrument_function)) void __cyg_profile_func_enter(void *fn, void *site) {
  (void)site;
  if (!active) return;
  uintptr_t h = ((uintptr_t)fn >> 4) * 2654435761u;
  for (int i = 0; i < SLOTS; ++i) {
    void *volatile *slot = &entered[(h + (uintptr_t)i) % SLOTS];
    void *seen = *slot;
    if (seen == fn) return;
    if (seen == NULL && __sync_bool_compare_and_swap(slot, NULL, fn)) return;
    if (*slot == fn) return;
  }
}

__attribute__((no_instrument_function)) void __cyg_profile_func_exit(void *fn, void *site) {
  (void)fn;
  (void)site;
}

__attribute__((no_instrument_function)) static void remember_name(const char *name) {
  if (!active || name == NULL) return;
  pthread_mutex_lock(&names_lock);
  int known = 0;
  for (int i = 0; i < name_count && !known; ++i) known = strcmp(names[i], name) == 0;
  if (!known && name_count < NAMES) names[name_count++] = strdup(name);
  pthread_mutex_unlock(&names_lock);
}

__attribute__((no_instrument_function)) void compliance_probe_mark(int index, int run, int begin) {
  char line[4352];
  if (begin) {
    for (int i = 0; i < SLOTS; ++i) entered[i] = NULL;
    pthread_mutex_lock(&names_lock);
    for (int i = 0; i < name_count; ++i) free(names[i]);
    name_count = 0;
    pthread_mutex_unlock(&names_lock);
    snprintf(line, sizeof line, "B %d %d\n", index, run);
    put(line);
    __sync_synchronize();
    active = 1;
    return;
  }
  active = 0;
  __sync_synchronize();
  for (int i = 0; i < SLOTS; ++i) {
    Dl_info info;
    if (entered[i] != NULL && dladdr(entered[i], &info) && info.dli_fname != NULL) {
      snprintf(line, sizeof line, "F %s\t%lx\n", info.dli_fname,
               (unsigned long)((uintptr_t)entered[i] - (uintptr_t)info.dli_fbase));
      put(line);
    }
  }
  pthread_mutex_lock(&names_lock);
  for (int i = 0; i < name_count; ++i) {
    snprintf(line, sizeof line, "K %.4000s\n", names[i]);
    put(line);
  }
  pthread_mutex_unlock(&names_lock);
  snprintf(line, sizeof line, "E %d %d\n", index, run);
  put(line);
}

#ifdef COMPLIANCE_WITH_CUPTI
__attribute__((no_instrument_function)) static void CUPTIAPI on_api(void *data, CUpti_CallbackDomain domain,
                                                                    CUpti_CallbackId cbid, const void *cbdata) {
  (void)data;
  (void)cbid;
  const CUpti_CallbackData *info = (const CUpti_CallbackData *)cbdata;
  if (domain != CUPTI_CB_DOMAIN_RUNTIME_API && domain != CUPTI_CB_DOMAIN_DRIVER_API) return;
  if (info->callbackSite != CUPTI_API_ENTER || info->functionName == NULL) return;
  if (strstr(info->functionName, "Launch") == NULL) return;
  remember_name(info->symbolName);
}

static int cupti_ready;

int compliance_probe_cupti_ready(void) { return cupti_ready; }
#endif

__attribute__((constructor, no_instrument_function)) static void probe_start(void) {
  unsetenv("LD_PRELOAD");
  if (fcntl(PROBE_FD, F_GETFD) != -1) {
    probe_fd = PROBE_FD;
    fcntl(PROBE_FD, F_SETFD, FD_CLOEXEC);
  }
#ifdef COMPLIANCE_WITH_CUPTI
  CUpti_SubscriberHandle subscriber;
  if (cuptiSubscribe(&subscriber, (CUpti_CallbackFunc)on_api, NULL) == CUPTI_SUCCESS &&
      cuptiEnableDomain(1, subscriber, CUPTI_CB_DOMAIN_RUNTIME_API) == CUPTI_SUCCESS &&
      cuptiEnableDomain(1, subscriber, CUPTI_CB_DOMAIN_DRIVER_API) == CUPTI_SUCCESS) {
    cupti_ready = 1;
  } else {
    put("X cupti-unavailable\n");
  }
#endif
}
