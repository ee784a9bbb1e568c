"""battles"""
