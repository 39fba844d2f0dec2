// HugeCTR-style header (signature fixture)
#pragma once
// a header of real size: signature evidence needs more than an empty marker
