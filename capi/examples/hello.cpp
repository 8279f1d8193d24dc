// rcoll from C++: an owning wrapper around the C handle, errors as exceptions, and
// std::vector buffers. Ranks come from the environment launcher (see hello.c).
//
//   c++ -std=c++17 hello.cpp $(pkg-config --cflags --libs rcoll) -o hello_cpp
#include <rcoll.h>

#include <cstdio>
#include <numeric>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

class Comm {
 public:
  Comm() { check(rcollCommInitFromEnv(&comm_), nullptr); }
  explicit Comm(rcollComm_t c) : comm_(c) {}
  Comm(const Comm&) = delete;
  Comm& operator=(const Comm&) = delete;
  ~Comm() {
    if (comm_) rcollCommDestroy(comm_);
  }
  int rank() const {
    int r = 0;
    check(rcollCommUserRank(comm_, &r), comm_);
    return r;
  }
  int size() const {
    int n = 0;
    check(rcollCommCount(comm_, &n), comm_);
    return n;
  }
  void all_reduce(std::vector<double>& v, rcollRedOp_t op) {
    check(rcollAllReduce(v.data(), v.data(), v.size(), rcollFloat64, op, comm_), comm_);
  }
  std::vector<int> all_gather(int mine) {
    std::vector<int> all(static_cast<size_t>(size()));
    check(rcollAllGather(&mine, all.data(), 1, rcollInt32, comm_), comm_);
    return all;
  }
  Comm split(int color, int key) {
    rcollComm_t c = nullptr;
    check(rcollCommSplit(comm_, color, key, &c), comm_);
    return Comm(c);
  }

 private:
  static void check(rcollResult_t r, rcollComm_t c) {
    if (r != rcollSuccess)
      throw std::runtime_error(std::string(rcollGetErrorString(r)) + ": " + rcollGetLastError(c));
  }
  rcollComm_t comm_ = nullptr;
};

}  // namespace

int main() {
  try {
    Comm world;
    const int rank = world.rank(), n = world.size();
    std::vector<double> v(1000, rank + 1.0);
    world.all_reduce(v, rcollSum);
    const double want = n * (n + 1) / 2.0;
    for (double x : v)
      if (x != want) throw std::runtime_error("wrong sum " + std::to_string(x));
    std::vector<int> ranks = world.all_gather(rank);
    std::vector<int> expect(static_cast<size_t>(n));
    std::iota(expect.begin(), expect.end(), 0);
    if (ranks != expect) throw std::runtime_error("wrong all_gather");
    Comm half = world.split(rank % 2, rank);
    std::vector<double> h(10, 1.0);
    half.all_reduce(h, rcollSum);
    if (h[0] != static_cast<double>(half.size())) throw std::runtime_error("wrong split sum");
    std::printf("HELLO-CPP-OK rank %d of %d (group of %d)\n", rank, n, half.size());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
