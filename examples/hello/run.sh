#!/bin/sh
# A tiny executor package: greets, and shows where it runs.
echo "$GREETING, ${1:-nobody}! (uid $(id -u), in $PWD)"
