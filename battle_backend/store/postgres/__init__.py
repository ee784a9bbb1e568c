"""store/postgres"""
