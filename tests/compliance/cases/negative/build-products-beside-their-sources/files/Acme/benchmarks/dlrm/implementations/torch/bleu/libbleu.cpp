// bleu helpers
#include <vector>
int bleu_degree(const std::vector<int>& edges, int node) {
  int n = 0;
  for (int e : edges) n += (e == node);
  return n;
}
