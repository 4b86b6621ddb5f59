# about: The worked solution from source/, typed into the release notebook: every point.
# base: solution
# loses:
