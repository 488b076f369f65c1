#!/usr/bin/env bash
# insn_count.sh - static instruction counts of the hot kernels, aarch64 NEON next to x86 AVX2 /
# AVX-512, from objdump of the kernel object files (no speed claim: counts only).
#   bash bench/insn_count.sh [X86_BUILD [AARCH64_BUILD]]     (defaults: build, build-aarch64)
# For each kernel: its instruction count, and its loops (a backward branch to an address in the
# same function): "body@depth" = instructions from the branch target to the branch, depth 0 the
# innermost. The loop that runs once per block (32 or 256 elements: see the "per" column) is
# the per-block cost; a loop over several blocks at once shows up with its unrolled body.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
X=${1:-$root/build}
A=${2:-$root/build-aarch64}
obj() { echo "$1/CMakeFiles/q35engine.dir/src/$2.o"; }

# count OBJDUMP OBJECT SYMBOL -> "total loops..."
count() {
  local od=$1 o=$2 sym=$3
  [ -f "$o" ] || { echo "(no $(basename "$o"))"; return; }
  "$od" -d --no-show-raw-insn "$o" | python3 -c '
import re, sys
sym = sys.argv[1]
on, addr, loops = False, [], []
br = re.compile(r"\t(b\.[a-z]+|b|cbn?z|tbn?z|j[a-z]+)\s+(?:[^\s,]+,\s*)*([0-9a-f]+) <")
for line in sys.stdin:
    if re.match(r"^[0-9a-f]+ <%s>:$" % re.escape(sym), line):
        on = True
        continue
    if on and re.match(r"^[0-9a-f]+ <", line):
        break
    m = re.match(r"^\s*([0-9a-f]+):\t", line)
    if on and m:
        a = int(m.group(1), 16)
        addr.append(a)
        b = br.search(line)
        if b and int(b.group(2), 16) <= a:
            loops.append((int(b.group(2), 16), a))
if not addr:
    print("(not found)")
    sys.exit()
out = [str(len(addr))]
for t, e in loops:
    body = sum(1 for a in addr if t <= a <= e)
    depth = sum(1 for (t2, e2) in loops if (t2, e2) != (t, e) and t2 >= t and e2 <= e)
    out.append("%d@%d" % (body, depth))
print(" ".join(out))
' "$sym"
}

printf "%-26s %-6s %-30s %s\n" kernel per "aarch64 (total, loops)" "x86 (total, loops)"
row() { # NAME PER NEON-FILE NEON-SYM X86-FILE X86-SYM
  printf "%-26s %-6s %-30s %s\n" "$1" "$2" "$(count aarch64-linux-gnu-objdump "$(obj "$A" "$3")" "$4")" \
    "$(count objdump "$(obj "$X" "$5")" "$6")"
}
row "q4_0 dot base/avx2" 32 kernels/quant_neon.c dot_q4_0_base kernels/quant_avx2.c t_q4_0_dot
row "q4_0 dot sdot/avx512" 32 kernels/quant_neon.c dot_q4_0_dp kernels/quant_avx512.c t_q4_0_dot
row "q4_0 2x2 smmla/avx2 2x2" 32 kernels/quant_neon.c q4_0_2x2 kernels/quant_avx2.c t_q4_0_rc
row "q8_0 dot base/avx2" 32 kernels/quant_neon.c dot_q8_0_base kernels/quant_avx2.c t_q8_0_dot
row "q8_0 dot sdot/avx2" 32 kernels/quant_neon.c dot_q8_0_dp kernels/quant_avx2.c t_q8_0_dot
row "q8_0 2x2 smmla/avx2 2x2" 32 kernels/quant_neon.c q8_0_2x2 kernels/quant_avx2.c t_q8_0_rc
row "q4_k dot sdot/avx2" 256 kernels/quant_neon.c dot_q4_k_dp kernels/quant_avx2.c t_q4_k_dot
row "q6_k dot sdot/avx2" 256 kernels/quant_neon.c dot_q6_k_dp kernels/quant_avx2.c t_q6_k_dot
row "q5_k dot sdot/avx2" 256 kernels/quant_neon.c dot_q5_k_dp kernels/quant_avx2.c t_q5_k_dot
row "iq4_xs dot sdot/avx2" 256 kernels/quant_neon.c dot_iq4_xs_dp kernels/quant_avx2.c t_iq4_xs_dot
row "q5_0 dot sdot/avx2" 32 kernels/quant_neon.c dot_q5_0_dp kernels/quant_avx2.c t_q5_0_dot
row "q8_0 quantize/avx2" 32 kernels/quant_neon.c q8_0_block_neon kernels/quant_avx2.c quant_q8_0_256
row "sampler exp_array" 4/8 sample/kernels_neon.c sample_exp_array_neon sample/kernels_avx2.c sample_exp_array_avx2
row "sampler scan" 4/8 sample/kernels_neon.c sample_scan_neon sample/kernels_avx2.c sample_scan_avx2
row "attn f16 1 head" 8 kernels/attn_neon.c attn_f161 kernels/attn_avx2.c attn_f161
