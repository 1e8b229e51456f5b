"""Triage: relaunch a failing arm under one knob change at a time, replay, narrow by delta debugging, write a bundle."""
