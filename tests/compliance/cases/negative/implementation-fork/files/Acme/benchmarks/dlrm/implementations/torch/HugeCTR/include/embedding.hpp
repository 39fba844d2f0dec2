// HugeCTR-style header (signature fixture)
#pragma once
