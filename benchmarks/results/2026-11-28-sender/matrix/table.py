import json,sys
# usage: table.py MODE  -> markdown rows for the three buffers
mode=sys.argv[1]
bufs=[('208 KiB',212992),('4 MiB',4194304),('32 MiB',33554432)]
docs={b:json.load(open(f'/tmp/mx/{mode}-{v}/compare.json')) for b,v in bufs}
print('| rate | size | '+' | '.join(f'{b}: wirespeed | iperf3 | bare | ws/iperf3' for b,_ in bufs)+' |')
print('|---|---:|'+'---:|'*12)
rows=docs['208 KiB']['medians']
for i,r in enumerate(rows):
    cells=[]
    for b,_ in bufs:
        m=docs[b]['medians'][i]
        assert m['asked']==r['asked'] and m['size']==r['size']
        w=m['wirespeed']['recv_cpu_ns_per_packet']; ip=m['iperf3']['recv_cpu_ns_per_packet']; ba=m['bare']['recv_cpu_ns_per_packet']
        cells += [f'{w:,.0f}',f'{ip:,.0f}',f'{ba:,.0f}',f'**{w/ip:.2f}**']
    asked=r['asked'].replace('.00 ','').replace(' Mb/s','M').replace(' Gb/s','G')
    print(f"| {asked} | {r['size']} | "+' | '.join(cells)+' |')
# loss summary
for b,_ in bufs:
    for m in docs[b]['medians']:
        for t in ['wirespeed','iperf3','bare']:
            if m[t]['loss_percent']>0: print(f"loss {b} {m['asked']} {m['size']} {t} {m[t]['loss_percent']:.3f}% lossy_runs={m[t]['lossy_runs']}", file=sys.stderr)
