python3 nmt.py
