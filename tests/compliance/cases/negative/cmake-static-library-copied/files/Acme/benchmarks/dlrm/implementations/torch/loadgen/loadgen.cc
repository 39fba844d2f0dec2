#include <cstdio>
#include <string>

std::string BuildDate();

int issue_queries(int count) {
  int issued = 0;
  for (int i = 0; i < count; ++i) {
    issued += 1;
  }
  std::printf("issued %d queries (built %s)\n", issued, BuildDate().c_str());
  return issued;
}
