#!/bin/sh
test -s review.md
