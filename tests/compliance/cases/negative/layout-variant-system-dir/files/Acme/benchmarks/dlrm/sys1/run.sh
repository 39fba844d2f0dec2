#!/bin/sh
python train.py
