"""store/sqlite"""
