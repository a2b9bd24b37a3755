# Where the fused forward stands against PyTorch after §99 (bench/NOTES.md §101): the public suite's dwsep rows and
# 16 problems of a seed never drawn before (131), every candidate of every family tuned on fresh DBs, PyTorch's
# two calls in the same run.
bash scripts/dwsep_standing.sh 131 16
