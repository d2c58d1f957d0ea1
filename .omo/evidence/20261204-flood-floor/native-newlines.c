#include <string.h>
int newlines(const unsigned char *p, int len, int *out, int room) {
  int n = 0; const unsigned char *at = p, *end = p + len;
  while (at < end) { const unsigned char *nl = memchr(at, 10, end - at); if (!nl) break; if (n < room) out[n] = (int)(nl - p); n++; at = nl + 1; }
  return n;
}
