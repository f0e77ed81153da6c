from base import *
import sys
W=int(sys.argv[1])
out=[]
for i,t in enumerate(T):
    js=[j for j in range(i-W,i+W+1) if 0<=j<N and T[j]['conv']==t['conv'] and T[j]['session']==t['session']]
    out.append(' '.join(f"{T[j]['speaker']}: {T[j]['text']}" for j in js))
json.dump(out,open(f'{D}win{W}.json','w'))
