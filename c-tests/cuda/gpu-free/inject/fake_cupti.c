/* A fake libcupti.so.13 for test_inject_end_to_end: it keeps the subscriber's callback so that the test can raise
 * callbacks through the library's own subscription. FAKE_CUPTI_SUBSCRIBE_RESULT makes cuptiSubscribe fail. */
#include <stdint.h>
#include <stdlib.h>

typedef void (*callback_t)(void* userdata, int domain, uint32_t cbid, const void* data);

static callback_t g_callback;
static void* g_userdata;
static int g_subscribes;
static int g_enabled;

int cuptiSubscribe(void** subscriber, callback_t callback, void* userdata) {
  ++g_subscribes;
  const char* forced = getenv("FAKE_CUPTI_SUBSCRIBE_RESULT");
  if (forced != NULL && atoi(forced) != 0) {
    return atoi(forced);
  }
  g_callback = callback;
  g_userdata = userdata;
  *subscriber = &g_callback;
  return 0;
}
int cuptiUnsubscribe(void* subscriber) {
  (void)subscriber;
  g_callback = NULL;
  return 0;
}
int cuptiEnableCallback(uint32_t enable, void* subscriber, int domain, uint32_t cbid) {
  (void)subscriber;
  (void)domain;
  (void)cbid;
  g_enabled += enable != 0 ? 1 : 0;
  return 0;
}
int cuptiGetResultString(int result, const char** text) {
  *text = result == 39 ? "CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED" : "CUPTI_ERROR_UNKNOWN";
  return 0;
}

/* For the test. */
int fake_cupti_subscribes(void) { return g_subscribes; }
int fake_cupti_enabled(void) { return g_enabled; }
int fake_cupti_raise(int domain, uint32_t cbid, const void* data) {
  if (g_callback == NULL) {
    return 0;
  }
  g_callback(g_userdata, domain, cbid, data);
  return 1;
}
