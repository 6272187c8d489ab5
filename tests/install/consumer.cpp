// Reads every element of a small file through an installed warpstore.
#include <warpstore/array.cuh>

#include <cstdio>
#include <fstream>
#include <vector>

int main(int argc, char** argv) {
  if (argc != 2) return 2;
  std::vector<std::uint64_t> words(1 << 16);
  for (std::size_t i = 0; i < words.size(); ++i) words[i] = i * 2654435761u;
  std::ofstream(argv[1], std::ios::binary)
      .write(reinterpret_cast<const char*>(words.data()), words.size() * 8);
  warpstore::options o;
  o.cache_bytes = 64 << 10;
  o.ways = 4;
  o.queue_pairs = 1;
  o.service_threads = 1;
  o.direct = warpstore::direct_io::off;
  warpstore::array<std::uint64_t> a(argv[1], 0, o);
  const auto ref = a.ref();
  std::size_t wrong = 0;
  for (std::size_t i = 0; i < a.size(); ++i) wrong += ref[i] != words[i];
  a.check();
  std::printf("read %zu elements through an installed warpstore, %zu wrong\n", a.size(), wrong);
  return wrong == 0 ? 0 : 1;
}
