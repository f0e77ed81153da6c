import base, numpy as np, sys
sys.argv=['x','0.3']
import exp4  # trains adapter and sets base.EQ
import exp5
