"""instructor, JSON_SCHEMA mode: the same pydantic response model as instructor_tools.py, sent
as response_format json_schema."""
import sys

import instructor
from instructor_tools import ask  # this script's folder is sys.path[0]

ask(sys.argv[1], instructor.Mode.JSON_SCHEMA)
