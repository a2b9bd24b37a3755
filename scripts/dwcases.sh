for L in NHWGC NGCHW; do
python3 -m factory.cli tune --json --layout $L --dtype fp16 --problem "N=64,G=256,C=1,K=1,input=28x28,filter=3x3,pad=1" > $OUT/mnv1_$L.json
python3 -m factory.cli tune --json --layout $L --dtype fp16 --problem "N=64,G=72,C=1,K=1,input=56x56,filter=5x5,stride=2,pad=2" > $OUT/mnv3_$L.json
python3 -m factory.cli tune --json --layout $L --dtype fp16 --problem "N=32,G=256,C=1,K=1,input=2048,filter=15,pad=7" > $OUT/speech_$L.json
done
python3 - <<'PY'
import json,glob,os
for f in sorted(glob.glob(os.environ['OUT']+'/*.json')):
    d=json.load(open(f)); ms=[m for m in d['measurements'] if m['verified']]
    print(os.path.basename(f), len(d['measurements']), 'verified', len(ms))
    for m in ms[:4]: print('   %-70s %9.1f us %7.0f GB/s' % (m['instance'], m['median_us'], m['gbps']))
PY
