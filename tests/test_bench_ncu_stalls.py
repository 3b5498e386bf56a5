"""bench/ncu_stalls.py on a CSV laid out as ncu's source page prints it: its messages, the kernel's name line,
then the header and a row per SASS instruction."""
import subprocess
import sys

from bench_support import BENCH

PAGE = '''==PROF== Connected to process 1
"Kernel Name","k",
"Address","Source","Warp Stall Sampling (All Samples)","stall_long_sb","stall_long_sb (Not Issued)","stall_barrier"
"0x10","      LDG.E R89, desc[UR14][R18.64]","50","19","19","0"
"0x20","      IMAD.MOV.U32 R102, RZ, RZ, R89","1030","1026","1026","0"
"0x30","      BAR.SYNC.DEFER_BLOCKING 0x0","20","0","0","18"
'''


def test_the_most_stalled_instructions_come_first_with_their_reasons(tmp_path):
    (tmp_path / "page.csv").write_text(PAGE)
    out = subprocess.run([sys.executable, str(BENCH / "ncu_stalls.py"), str(tmp_path / "page.csv"), "--top", "2"],
                         capture_output=True, text=True, check=True).stdout.splitlines()
    assert len(out) == 2
    assert "IMAD.MOV.U32 R102" in out[0] and out[0].lstrip().startswith("93.6%") and "stall_long_sb 1026" in out[0]
    assert "Not Issued" not in out[0]
    assert "LDG.E R89" in out[1]
