// Runs kernels/sample_plan.cu's kernel on the host over cases written by inferd-core's
// `planned_draws_on_the_emulated_kernel` test (cases.bin) and writes its results
// (outs.bin) for that test to check against the host sampler. See run.sh.
#include <cstdio>
#include <vector>

#include "sample_plan.cu"

int main(int argc, char** argv) {
  if (argc != 3) return 2;
  FILE* in = std::fopen(argv[1], "rb");
  FILE* out = std::fopen(argv[2], "wb");
  if (!in || !out) return 2;
  auto u32 = [&] {
    uint32_t v = 0;
    if (std::fread(&v, 4, 1, in) != 1) std::exit(3);
    return v;
  };
  const uint32_t cases = u32();
  for (uint32_t c = 0; c < cases; ++c) {
    const uint32_t vocab = u32();
    std::vector<float> raw(vocab);
    if (std::fread(raw.data(), 4, vocab, in) != vocab) return 3;
    SamplePlan plan;
    if (std::fread(&plan, sizeof plan, 1, in) != 1) return 3;
    std::vector<uint32_t> words(u32() + 1);
    if (std::fread(words.data(), 4, words.size() - 1, in) != words.size() - 1) return 3;
    std::vector<uint32_t> pens(2 * u32() + 2);
    if (std::fread(pens.data(), 4, pens.size() - 2, in) != pens.size() - 2) return 3;
    std::vector<float> scratch(2 * size_t(vocab));
    SampleOut o{};
    ifd_sample_plans(raw.data(), int(vocab), &plan, words.data(), pens.data(), 1, scratch.data(), &o,
                     nullptr);
    std::fwrite(&o, sizeof o, 1, out);
  }
  std::fclose(out);
  return 0;
}
