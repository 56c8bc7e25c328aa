#include "qkv/core/parallel.h"

#include <omp.h>

namespace qkv {

int num_threads() { return omp_get_max_threads(); }
void set_num_threads(int n) {
  if (n > 0) omp_set_num_threads(n);
}
bool in_parallel_region() { return omp_in_parallel(); }

}  // namespace qkv
